"""SQLite stores: every store in one SQLite file (WAL mode, durable across a crash), for ONE server.

A file is one server's alone (`stores.sqlite.lock`): replicas need PostgreSQL or Redis. Because
one process writes the file, waits (a journal read, cancel requests) are signalled in-process
after the writing transaction commits, as in memory, and every atomic step of the Redis scripts
is one `BEGIN IMMEDIATE` transaction here (`stores.sqlite.database`).

    create_sqlite_stores(path) --> Database: a writer thread + a reader thread, one connection each
        tasks / leases / messages / checkpoints / pushes --> Database.write(step) / read(step)
        step committed --> the keys it woke (a journal, a cancel) --> waiters on the event loop
"""
