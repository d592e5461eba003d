"""The Lua scripts of the Redis stores, each one atomic step on the keys of one slot.

Their bodies are part of the deployed contract: a rolling deploy runs old and new replicas on the
same keys, and a script is run by its SHA, so a body changes only with a new name and a note of
why (the caller's docstring says what it relies on). A context's conversation and claim have
theirs in conversation_scripts.py, under the same rules.

The fences (docs/operations.md, "Fencing"): every write of a task's turn checks its lease's holder
and epoch in the script that writes (the lease shares the task's slot), and so does a task's
creation, which also refuses a task voided before it existed (`VOID_TASK`). A conversation's
writes are in another slot: they check the fence its claim carries (conversation_scripts.py).
"""

from __future__ import annotations

from stores.redis.support import LUA_NOW_MS, LUA_TOUCH, LuaScript

# --- tasks (stores.redis.tasks) ---

# The list indexes come in pairs (stores.redis.listing), the owner's then the context's: the first
# of a pair scored by status time (ms), the second by state (`state_score`). (CREATE_TASK and
# PUBLISH_EVENTS, before the by-state indexes, took two; the bodies below have names of their own
# so that old and new replicas of a rolling deploy each run theirs.)

# KEYS: task hash, journal, lease [, the four list indexes]. ARGV: snapshot, event, state, ms, us,
# ttl ms, journal max, task id, index ttl ms, state score, fence holder, fence epoch (both empty:
# unfenced). The indexes are given on one Redis (`_run_indexed`). Returns {1} once created;
# {0} (the lease no longer has that holder and epoch) or {-1, the voiding task} (`VOID_TASK` gave
# the task up) and nothing written: a creation held by a cut, or by a pause, that lands after
# the creator lost its lease (or after another request voided the task) is refused, not a
# second task with the same message. The indexes, shared by the owner's tasks, are `touch`ed.
# (CREATE_FENCED_TASK set every index's expiry at every creation; CREATE_LISTED_TASK, before the
# fence, took no lease: an earlier server runs its own body by its own name.)
CREATE_TOUCHING_TASK = LuaScript(
    LUA_TOUCH
    + """
if ARGV[11] ~= '' then
  local lease = redis.call('HMGET', KEYS[3], 'holder', 'epoch', 'void')
  if lease[3] then return {-1, lease[3]} end
  if lease[1] ~= ARGV[11] or lease[2] ~= ARGV[12] then return {0} end
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HSET', KEYS[1], 'seq', 1, 'pos', 1, 'task', ARGV[1],
           'state', ARGV[3], 'ms', ARGV[4], 'us', ARGV[5])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '1-1', 'e', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
for i = 4, #KEYS do
  local score = ARGV[4]
  if i % 2 == 1 then score = ARGV[10] end
  redis.call('ZADD', KEYS[i], score, ARGV[8])
  touch(KEYS[i], ARGV[9])
end
return {1}
"""
)

# KEYS: task hash, lease. ARGV: the voiding task's id, ttl ms. Gives up a task that does not
# exist (its context was found claimed by it before it was created): returns 0 if the task hash
# exists; else marks the lease `void` (the first voider stays) and returns 1, after which
# CREATE_FENCED_TASK refuses the task, whoever holds its lease. The lease hash keeps the task's
# TTL, so the mark outlives any creation that could still be on its way.
VOID_TASK = LuaScript(
    """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSETNX', KEYS[2], 'void', ARGV[1])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
return 1
"""
)

# KEYS: task hash, journal, lease [, the four list indexes, moved with a snapshot: on one Redis].
# ARGV: ttl ms, journal max, event id, fence holder, fence epoch, expected position ('' for none),
# snapshot, state, ms, us, expected state (the five empty without a snapshot), task id, index ttl
# ms, state score (the three empty without a snapshot), then the events (one, or a streamed
# answer's chunks that came while the previous write was out). Returns the last event's position,
# 0 if there is no such task, -1 if the task's state is not the expected one (a compare-and-set),
# -2 if the fence's holder and epoch no longer hold the lease, {-3, last position} if the
# journal's last position is not the expected one; nothing is written in those cases. A repeat
# of the last event id (a retry after a lost reply) appends nothing and returns the first
# position. A fenced entry carries the writer's epoch, so a journal shows who wrote it. The
# indexes move by ZADD XX: a task that is in none (created before them) is added by the list that
# finds it so. The task's fields are read in one HMGET and written in one HSET, and its keys and
# indexes are `touch`ed: a turn's events cost its journal entries and one write besides.
# (PUBLISH_LISTED_EVENTS wrote the same fields, in up to four writes, and set every expiry at
# every event: an earlier server runs its own body by its own name.)
PUBLISH_TOUCHING_EVENTS = LuaScript(
    LUA_TOUCH
    + """
local task = redis.call('HMGET', KEYS[1], 'seq', 'eid', 'eidpos', 'state')
if not task[1] then return 0 end
if ARGV[3] ~= '' and task[2] == ARGV[3] then return tonumber(task[3]) end
if ARGV[4] ~= '' then
  local lease = redis.call('HMGET', KEYS[3], 'holder', 'epoch')
  if lease[1] ~= ARGV[4] or lease[2] ~= ARGV[5] then return -2 end
end
local pos = tonumber(task[1])
if ARGV[6] ~= '' and pos ~= tonumber(ARGV[6]) then return {-3, pos} end
if ARGV[11] ~= '' and task[4] ~= ARGV[11] then return -1 end
for i = 15, #ARGV do
  pos = pos + 1
  if ARGV[4] ~= '' then
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], pos .. '-1', 'e', ARGV[i], 'epoch', ARGV[5])
  else
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], pos .. '-1', 'e', ARGV[i])
  end
end
local fields = {'seq', pos}
if ARGV[3] ~= '' then
  fields[3], fields[4], fields[5], fields[6] = 'eid', ARGV[3], 'eidpos', pos
end
if ARGV[7] ~= '' then
  local n = #fields
  fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4] = 'pos', pos, 'task', ARGV[7]
  fields[n + 5], fields[n + 6], fields[n + 7], fields[n + 8] = 'state', ARGV[8], 'ms', ARGV[9]
  fields[n + 9], fields[n + 10] = 'us', ARGV[10]
end
redis.call('HSET', KEYS[1], unpack(fields))
if ARGV[7] ~= '' then
  for i = 4, #KEYS do
    local score = ARGV[9]
    if i % 2 == 1 then score = ARGV[14] end
    redis.call('ZADD', KEYS[i], 'XX', score, ARGV[12])
    touch(KEYS[i], ARGV[13])
  end
end
if touch(KEYS[1], ARGV[1]) then redis.call('PEXPIRE', KEYS[2], ARGV[1]) end  -- together
return pos
"""
)

# --- task lists (stores.redis.listing): read-only, and the repairs a list makes ---

# KEYS: the index read [, the other index of its pair]. ARGV: highest score, lowest score, count,
# cursor score ('' for the first page), cursor task id, tail's highest score ('' for none), tail
# count, '1' for the members scored the lowest score. Returns {ZCOUNT of the range, up to `count`
# (member, score) after the cursor or from the top (false if the cursor's task is no longer at
# its score: the caller seeks by its score's members, element 3), those members or false, the
# oldest `tail count` members up to the tail's highest score, the members at the lowest score,
# ZCARD of the index, ZCARD of the other index (0 without it)}.
LIST_PAGE = LuaScript(
    """
local key, hi, lo, count = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local entries, bucket = false, false
if ARGV[4] == '' then
  entries = redis.call('ZRANGE', key, hi, lo, 'BYSCORE', 'REV', 'LIMIT', 0, count, 'WITHSCORES')
else
  local at = redis.call('ZSCORE', key, ARGV[5])
  if at and tonumber(at) == tonumber(ARGV[4]) then
    local rank = redis.call('ZREVRANK', key, ARGV[5])
    entries = redis.call('ZRANGE', key, rank + 1, rank + count, 'REV', 'WITHSCORES')
  else
    bucket = redis.call('ZRANGE', key, ARGV[4], ARGV[4], 'BYSCORE', 'REV')
  end
end
local tail, lowest = {}, {}
if ARGV[6] ~= '' then
  tail = redis.call('ZRANGE', key, lo, ARGV[6], 'BYSCORE', 'LIMIT', 0, ARGV[7], 'WITHSCORES')
end
if ARGV[8] ~= '' then lowest = redis.call('ZRANGE', key, lo, lo, 'BYSCORE') end
local other = 0
if KEYS[2] then other = redis.call('ZCARD', KEYS[2]) end
return {redis.call('ZCOUNT', key, lo, hi), entries, bucket, tail, lowest,
        redis.call('ZCARD', key), other}
"""
)

# KEYS: an index pair (by time, by state) [, the owner's pair, when the first is a context's].
# ARGV: index ttl ms, which of the pair was read (1 or 2), then per task: id, score read, ms ('' if
# the task is gone), state score. A task still at the score read is moved to its ms and state in
# the pair, or, gone, removed from every index given; one that moved since is left alone.
REPAIR_LISTING = LuaScript(
    """
local read = KEYS[tonumber(ARGV[2])]
for i = 3, #ARGV, 4 do
  local now = redis.call('ZSCORE', read, ARGV[i])
  if now and tonumber(now) == tonumber(ARGV[i + 1]) then
    if ARGV[i + 2] == '' then
      for k = 1, #KEYS do redis.call('ZREM', KEYS[k], ARGV[i]) end
    else
      redis.call('ZADD', KEYS[1], ARGV[i + 2], ARGV[i])
      redis.call('ZADD', KEYS[2], ARGV[i + 3], ARGV[i])
    end
  end
end
for k = 1, 2 do
  if redis.call('PTTL', KEYS[k]) == -1 then redis.call('PEXPIRE', KEYS[k], ARGV[1]) end
end
return 1
"""
)

# --- leases (stores.redis.leases) ---

# KEYS: lease, cancel flag[, running-leases bucket]. ARGV: holder, lease ttl ms, key ttl ms,
# index member. Returns {epoch, expiry}, or {0, 0} if another holder has a live lease. Taking the
# lease (free, or from an expired holder) increments the epoch; acquiring our own lease again
# keeps it. The epoch outlives a release. With the bucket (one Redis: any key may be named), the
# index entry is written in the same step; on a cluster it is in another slot: a second step.
# The lease is one write (holder, expiry and epoch in one HSET) and its expiry (set every time:
# the epoch must outlive every writer that holds it); the bucket, shared by many leases, is
# `touch`ed. (ACQUIRE_LEASE wrote the epoch apart and set the bucket's expiry at every
# acquire: an earlier server runs its own body by its own name.)
ACQUIRE_TOUCHING_LEASE = LuaScript(
    LUA_NOW_MS
    + LUA_TOUCH
    + """
local lease = redis.call('HMGET', KEYS[1], 'holder', 'expires', 'epoch')
if lease[1] then
  if lease[1] ~= ARGV[1] and tonumber(lease[2]) > now then return {0, 0} end
else
  redis.call('DEL', KEYS[2])
end
local expires = now + tonumber(ARGV[2])
local epoch = tonumber(lease[3]) or 0
if lease[1] ~= ARGV[1] or not lease[3] then epoch = epoch + 1 end
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'expires', expires, 'epoch', epoch)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
if KEYS[3] then
  redis.call('ZADD', KEYS[3], expires, ARGV[4])
  touch(KEYS[3], ARGV[3])
end
return {epoch, expires}
"""
)

# Same KEYS and ARGV. Returns {0: lost | 1: held | 2: held, cancel requested, expiry}.
RENEW_LEASE = LuaScript(
    LUA_NOW_MS
    + """
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] then return {0, 0} end
local expires = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'expires', expires)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local cancel = redis.call('EXISTS', KEYS[2])
if cancel == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
return {1 + cancel, expires}
"""
)

# KEYS: lease, cancel flag[, running-leases bucket]. ARGV: holder, index member. Returns 1 if it
# was ours (and now has no holder); with the bucket, its index entry is gone in the same step.
RELEASE_LEASE = LuaScript(
    """
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'holder')
redis.call('DEL', KEYS[2])
if KEYS[3] then redis.call('ZREM', KEYS[3], ARGV[2]) end
return 1
"""
)

# KEYS: lease. Returns 1 if a holder has it and it has not expired.
LEASE_IS_HELD = LuaScript(
    LUA_NOW_MS
    + """
local lease = redis.call('HMGET', KEYS[1], 'holder', 'expires')
if lease[1] and tonumber(lease[2]) > now then return 1 end
return 0
"""
)

# KEYS: lease. ARGV: holder. Returns the new expiry (now) if the lease was ours, else 0.
HAND_OVER_LEASE = LuaScript(
    LUA_NOW_MS
    + """
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'expires', now)
return now
"""
)

# KEYS: lease, cancel flag. ARGV: key ttl ms. Flags only a held lease (the flag dies with it).
FLAG_CANCEL = LuaScript(
    """
if redis.call('HEXISTS', KEYS[1], 'holder') == 0 then return 0 end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
return 1
"""
)

# KEYS: one bucket of the running leases. ARGV: limit, key ttl ms. Returns the members whose
# index score says expired by now (candidates: the lease hash decides).
EXPIRED_LEASES = LuaScript(
    LUA_NOW_MS
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[2])))
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
"""
)

# KEYS: lease. Returns 0 if no holder has it, 1 if held and live, 2 if held but expired (by the
# clock of the lease's own shard, which set its expiry).
LEASE_STATE = LuaScript(
    LUA_NOW_MS
    + """
local lease = redis.call('HMGET', KEYS[1], 'holder', 'expires')
if not lease[1] then return 0 end
if tonumber(lease[2]) > now then return 1 end
return 2
"""
)

# KEYS: processes. ARGV: process, heartbeat ttl ms, key ttl ms. Records the process's heartbeat
# and returns the processes whose heartbeat lapsed, removed here so that one caller alone gets each.
HEARTBEAT = LuaScript(
    LUA_NOW_MS
    + """
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
if #lapsed > 0 then redis.call('ZREM', KEYS[1], unpack(lapsed)) end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return lapsed
"""
)

# --- checkpoints (stores.redis.checkpoints); conversations and claims: conversation_scripts ---

# KEYS: checkpoint, lease. ARGV: checkpoint, ttl ms [, fence holder, fence epoch]. Returns 0 (and
# writes nothing) if the fence no longer holds the lease.
SAVE_CHECKPOINT = LuaScript(
    """
if #ARGV > 2 then
  local lease = redis.call('HMGET', KEYS[2], 'holder', 'epoch')
  if lease[1] ~= ARGV[3] or lease[2] ~= ARGV[4] then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
)
