"""The task runtime: tasks started, leased, fenced, journaled and taken over; turns scheduled;
one journal follower for streams, blocking sends and push delivery. The engine never imports it."""
