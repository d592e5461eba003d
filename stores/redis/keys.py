"""Every Redis key (and the one channel) the Redis stores use, built in this one place.

Layout (`p` = the prefix, REDIS_KEY_PREFIX; `<x>` = x percent-encoded, see `encode`):

    p:task:<owner>:{<task>}             HASH    seq (journal counter), pos, task (snapshot JSON),
                                                state, ms, us (status timestamp, for listing)
    p:journal:<owner>:{<task>}          STREAM  entry id "<position>-1", field e = event JSON
    p:checkpoint:<owner>:{<task>}       STRING  the running turn's checkpoint
    p:lease:<owner>:{<task>}            HASH    holder, expires (ms, Redis server time), epoch;
                                                void: the task that gave this one up uncreated
    p:cancel:<owner>:{<task>}           STRING  "1": cancel requested while the lease is held
    p:push:<owner>:{<task>}             HASH    push-notification config id -> config JSON
    p:push-cursor:<owner>:{<task>}      STRING  the last journal position pushed
    p:conversation:<owner>:{<context>}  LIST    ChatMessage JSON, oldest first
    p:units:<owner>:{<context>}         SET     ids of the units appended (append at most once)
    p:claim:<owner>:{<context>}         STRING  the task id running a turn in the context
    p:claim-fence:<owner>:{<context>}   HASH    task, holder, epoch: the fence the claim's task
                                                writes the conversation under (conversation_scripts)
    p:rate:{<principal>}                HASH    tokens, at (ms): the principal's rate-limit bucket
    p:tasks:{<owner>}                   ZSET    the owner's task ids, score = status time (ms)
    p:tasks-by-state:{<owner>}          ZSET    the same, score = state * 2^42 + status time (ms)
    p:context-tasks:{<owner>}:<context> ZSET    the owner's task ids of one context, as p:tasks
    p:context-tasks-by-state:{<owner>}:<context>
                                        ZSET    the same, as p:tasks-by-state (stores.redis.listing)
    p:leases:{b<n>}                     ZSET    "<owner>:<task>" of held leases, score = expiry ms,
                                                in bucket n = crc32(member) % LEASE_BUCKETS
    p:processes                         ZSET    live server processes, score = heartbeat expiry ms
    p:wake:<process>:<n>                STREAM  one entry: ends a process' shared journal read n
                                                early so that it covers a new reader (one Redis)
    p:cancel                            pub/sub channel of cancel requests (not a key)

Structural scoping: the owner is in every key, so one owner cannot name another's data.
Redis Cluster: the `{...}` hash tag puts the keys one operation touches together in one slot: all
of a task's keys carry `{<task>}`, a conversation's `{<context>}`, an owner's list indexes
`{<owner>}`. The running-leases index is split into LEASE_BUCKETS keys of their own slots, so lease
renewals spread over the shards instead of all writing one key; a sweep reads every bucket (one
pipelined script per bucket, each within its slot). `p:processes` (one write per replica per
heartbeat) and the cancel channel are the only keys every replica shares.

Owner and ids are percent-encoded (everything but letters, digits and `-._~`), so a `:`, `{` or
`}` in them can neither make two keys collide nor move a hash tag. The empty string is encoded as
a lone `%`, which no non-empty value encodes to, so that `{}` (an empty tag, which Redis ignores)
never occurs.
"""

from __future__ import annotations

import functools
import re
import zlib
from dataclasses import dataclass
from urllib.parse import quote, unquote

LEASE_BUCKETS = 16
"""The running-leases index is split in this many keys, each a hash tag (a slot) of its own."""


# What `quote(value, safe="")` leaves as it is: ids (uuids) and most owners are made of these
# alone, so they skip quote's per-character walk.
_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]+").fullmatch


# A turn builds ~70 keys from the same owner and ids: the last few thousand components are
# remembered (a lookup, against a regular expression's match per component).
@functools.lru_cache(maxsize=4096)
def encode(value: str) -> str:
    """Percent-encode one key component (injective; the result has no `:`, `{` or `}`)."""
    if _UNRESERVED(value):
        return value
    return quote(value, safe="") if value else "%"


def decode(component: str) -> str:
    return "" if component == "%" else unquote(component)


@dataclass(frozen=True, slots=True)
class RedisKeys:
    prefix: str = "a2a"

    def __post_init__(self) -> None:
        if not self.prefix or "{" in self.prefix or "}" in self.prefix:
            raise ValueError(
                f"Redis key prefix {self.prefix!r} must be non-empty and contain no '{{' or '}}'"
                " (they would change the Redis Cluster hash tag of every key)"
            )

    # --- a task: all in the slot of {<task id>} ---

    def _of_task(self, kind: str, owner: str, task_id: str) -> str:
        return f"{self.prefix}:{kind}:{encode(owner)}:{{{encode(task_id)}}}"

    def task(self, owner: str, task_id: str) -> str:
        return self._of_task("task", owner, task_id)

    def journal(self, owner: str, task_id: str) -> str:
        return self._of_task("journal", owner, task_id)

    def checkpoint(self, owner: str, task_id: str) -> str:
        return self._of_task("checkpoint", owner, task_id)

    def lease(self, owner: str, task_id: str) -> str:
        return self._of_task("lease", owner, task_id)

    def cancel_flag(self, owner: str, task_id: str) -> str:
        return self._of_task("cancel", owner, task_id)

    def push_configs(self, owner: str, task_id: str) -> str:
        return self._of_task("push", owner, task_id)

    def push_cursor(self, owner: str, task_id: str) -> str:
        return self._of_task("push-cursor", owner, task_id)

    # --- a conversation: all in the slot of {<context id>} ---

    def conversation(self, owner: str, context_id: str) -> str:
        return f"{self.prefix}:conversation:{encode(owner)}:{{{encode(context_id)}}}"

    def units(self, owner: str, context_id: str) -> str:
        return f"{self.prefix}:units:{encode(owner)}:{{{encode(context_id)}}}"

    def claim(self, owner: str, context_id: str) -> str:
        return f"{self.prefix}:claim:{encode(owner)}:{{{encode(context_id)}}}"

    def claim_fence(self, owner: str, context_id: str) -> str:
        return f"{self.prefix}:claim-fence:{encode(owner)}:{{{encode(context_id)}}}"

    # --- an owner's list indexes: all in the slot of {<owner>} ---

    def owner_tasks(self, owner: str) -> str:
        return f"{self.prefix}:tasks:{{{encode(owner)}}}"

    def context_tasks(self, owner: str, context_id: str) -> str:
        return f"{self.prefix}:context-tasks:{{{encode(owner)}}}:{encode(context_id)}"

    def owner_tasks_by_state(self, owner: str) -> str:
        return f"{self.prefix}:tasks-by-state:{{{encode(owner)}}}"

    def context_tasks_by_state(self, owner: str, context_id: str) -> str:
        return f"{self.prefix}:context-tasks-by-state:{{{encode(owner)}}}:{encode(context_id)}"

    # --- a principal's rate-limit bucket: its own slot (buckets spread over a cluster) ---

    def rate_bucket(self, principal: str) -> str:
        return f"{self.prefix}:rate:{{{encode(principal)}}}"

    # --- global: the running leases (one small key) and the cancel channel ---

    def running_leases(self, bucket: int) -> str:
        return f"{self.prefix}:leases:{{b{bucket}}}"

    @staticmethod
    def lease_bucket(member: str) -> int:
        """The running-leases bucket of a lease member (stable across processes)."""
        return zlib.crc32(member.encode()) % LEASE_BUCKETS

    def wake(self, process: str, shard: int) -> str:
        return f"{self.prefix}:wake:{encode(process)}:{shard}"

    def processes(self) -> str:
        return f"{self.prefix}:processes"

    def cancel_channel(self) -> str:
        return f"{self.prefix}:cancel"

    @staticmethod
    def lease_member(owner: str, task_id: str) -> str:
        return f"{encode(owner)}:{encode(task_id)}"

    @staticmethod
    def parse_lease_member(member: str) -> tuple[str, str]:
        owner, task_id = member.split(":", 1)
        return decode(owner), decode(task_id)
