"""Tables as files: rows in PAX pages (one minipage per column) in raw engine pages.

``schema`` (the schema text: columns and types), ``values`` (a value's text in CSV, JSON and
back), ``pax`` (the on-device PAX page format), ``index`` (the store's records in B+trees),
``store`` (the tables of one engine: create, append in one transaction, remove), ``render``
(the CSV and JSON-lines views of a table version, sizes known without a scan), ``ingest``
(parsing a CSV or JSON-lines file against a schema), ``check`` (fsck's table pass),
``subtree`` (``/tables`` in the namespace).
"""
