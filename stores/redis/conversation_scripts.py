"""The Lua scripts of a context's conversation and claim (stores.redis.messages), all on the keys of
the context's slot; scripts.py's rules hold (a body changes only with a new name).

The claim of a context is two keys in its slot: the claim itself, a string naming the task
(what a server of an earlier version reads and writes), and beside it the claim's fence, a hash
{task, holder, epoch}: the lease fence of the task that holds the claim, the latest it was given.
A fence hash that names another task than the claim is left from an earlier claim (the claim
was then taken by an earlier server, which writes no fence): it counts as none. A write under a
fence (task, holder, epoch) is admitted when the claim names the task and its fence is none, or
has an epoch below the writer's (then the writer's replaces it: epochs only grow), or is the
writer's own: a turn whose lease was taken over writes nothing once its successor fenced the
claim (a takeover or an answered task fences it before its turn writes).
"""

from __future__ import annotations

from stores.redis.support import LUA_TOUCH, LuaScript

# admits(fence key, task, holder, epoch): 0 refused, 1 the fence itself, 2 a later one (to record).
_ADMITS = """
local function admits(fence, task, holder, epoch)
  local held = redis.call('HMGET', fence, 'task', 'holder', 'epoch')
  if held[1] ~= task then return 2 end
  local was, now = tonumber(held[3]), tonumber(epoch)
  if was < now then return 2 end
  if was == now and held[2] == holder then return 1 end
  return 0
end
"""

# KEYS: conversation, units, claim, claim fence. ARGV: window size, unit id, ttl ms, fence task,
# fence holder, fence epoch (the three empty: unfenced), then the unit's messages (JSON). Returns
# {1 if the unit is new (0: it was there, nothing appended), the last `window size` messages as
# they were before}: a turn's start (its history, then its user message) is one script, and one
# round trip; or {-1} and nothing written if the claim does not admit the fence. A fenced append
# keeps the claim about as long as the conversation: all four keys are `touch`ed (a turn's two
# appends set their expiries once, not twice each). (APPEND_FENCED_MESSAGES set all four
# expiries at every append; APPEND_MESSAGES, before the fence, checked nothing: an earlier
# server runs its own body by its own name.)
APPEND_TOUCHING_MESSAGES = LuaScript(
    _ADMITS
    + LUA_TOUCH
    + """
if ARGV[4] ~= '' then
  if redis.call('GET', KEYS[3]) ~= ARGV[4] then return {-1} end
  local admitted = admits(KEYS[4], ARGV[4], ARGV[5], ARGV[6])
  if admitted == 0 then return {-1} end
  if admitted == 2 then
    redis.call('HSET', KEYS[4], 'task', ARGV[4], 'holder', ARGV[5], 'epoch', ARGV[6])
  end
  touch(KEYS[3], ARGV[3])
  touch(KEYS[4], ARGV[3])
end
local window = {}
local size = tonumber(ARGV[1])
if size > 0 then window = redis.call('LRANGE', KEYS[1], -size, -1) end
local added = redis.call('SADD', KEYS[2], ARGV[2])
if added == 1 then
  for i = 7, #ARGV, 1000 do  -- in batches: unpack() is bounded by Lua's C stack
    redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
end
touch(KEYS[2], ARGV[3])
touch(KEYS[1], ARGV[3])
return {added, window}
"""
)

# KEYS: claim, claim fence. ARGV: task id, ttl ms, fence holder, fence epoch (both empty:
# unfenced). Takes a free claim (with the fence), or re-fences the task's own: returns {0}; {-1}
# if the claim is the task's under a later fence (the caller's lease was taken over); {1, holder,
# 1 if the holder's claim carries its fence} if another task holds it. (The claim was a plain
# SET NX GET before the fence, which an earlier server still sends: it writes no fence.)
CLAIM_CONTEXT = LuaScript(
    _ADMITS
    + """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then
  local fenced = 0
  if redis.call('HGET', KEYS[2], 'task') == held then fenced = 1 end
  return {1, held, fenced}
end
if ARGV[3] == '' then
  if not held then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    redis.call('DEL', KEYS[2])
  end
  return {0}
end
if held and admits(KEYS[2], ARGV[1], ARGV[3], ARGV[4]) == 0 then return {-1} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[2], 'task', ARGV[1], 'holder', ARGV[3], 'epoch', ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return {0}
"""
)

# KEYS: claim, claim fence. ARGV: stale holder, task id, ttl ms, fence holder, fence epoch (both
# empty: unfenced). Takes the claim only from that holder, with the new task's fence.
REPLACE_FENCED_CLAIM = LuaScript(
    """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if ARGV[4] == '' then
  redis.call('DEL', KEYS[2])
else
  redis.call('HSET', KEYS[2], 'task', ARGV[2], 'holder', ARGV[4], 'epoch', ARGV[5])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
"""
)

# KEYS: claim, claim fence. ARGV: task id, fence holder, fence epoch (both empty: unfenced).
# Deletes the claim (and its fence) only if this task holds it, under this fence or an earlier
# one: a turn whose lease was taken over cannot free the context its successor runs in. Returns 1
# if it did.
RELEASE_FENCED_CLAIM = LuaScript(
    _ADMITS
    + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' and admits(KEYS[2], ARGV[1], ARGV[2], ARGV[3]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""
)
