"""sqlq's benchmark suite: ``python -m bench`` (see ``python -m bench --help``).

sqlq is measured side by side with a raw-SQLite lease queue (the reference,
``bench/reference.py``) and with persist-queue, litequeue and huey's SQLite
storage when they are installed (``pip install -e '.[bench]'``).  The run writes
``bench/RESULTS.md`` and its plots.
"""
