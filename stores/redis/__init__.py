"""The Redis backend: every store on one Redis or a Redis Cluster, every key built in keys.py."""
