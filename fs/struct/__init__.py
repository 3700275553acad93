"""Data structures on the page engine: B+tree, linear hash, array list, linked list.

Importing this package registers every structure's operations with the engine
(``traxfs.fs.engine.opcodes.register``: opcodes 100-199 — ``common`` 100-109, ``btree``
110-119, ``linearhash`` 120-129, ``arraylist`` 130-139, ``linkedlist`` 140-149) and its fsck
checker (``traxfs.fs.engine.check.register_checker``). Whoever opens an engine whose log may
hold these operations imports this package first: recovery may have to redo them or run their
logical undos, and it refuses a record whose opcode nobody registered. Each structure is
identified by its header page; the catalog names roots ``KIND:NAME`` (see
``traxfs.fs.engine.check``).
"""

from . import arraylist, btree, common, linearhash, linkedlist  # noqa: F401
from .arraylist import ArrayList
from .btree import BTree
from .linearhash import LinearHash
from .linkedlist import LinkedList

__all__ = ["ArrayList", "BTree", "LinearHash", "LinkedList"]
