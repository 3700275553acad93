"""Data structures on the page engine (SPEC §3, Stasis §2): B+tree, linear hash, array list,
linked list.

Importing this package registers every structure's operations (opcodes 100-199: ``common``
100-109, ``btree`` 110-119, ``linearhash`` 120-129, ``arraylist`` 130-139, ``linkedlist``
140-149) and fsck checkers. The engine imports it before recovery, because recovery may have to
run these structures' logical undos. Each structure is identified by its header page; the
catalog names roots ``KIND:NAME`` (see ``traxfs.fs.engine.check``).
"""

from traxfs.fs.struct import arraylist, btree, common, linearhash, linkedlist  # noqa: F401
from traxfs.fs.struct.arraylist import ArrayList
from traxfs.fs.struct.btree import BTree
from traxfs.fs.struct.linearhash import LinearHash
from traxfs.fs.struct.linkedlist import LinkedList

__all__ = ["ArrayList", "BTree", "LinearHash", "LinkedList"]
