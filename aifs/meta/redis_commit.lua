-- One batch of the metadata KV (aifs.meta.redis_kv), checked and applied atomically.
--
-- ARGV[1]  the batch, msgpack: an array of six lists, in this order:
--            reads       key, value, ...     keys that must still hold these values
--            absent      key, ...            keys that must still be absent
--            empty       prefix, ...         ranges that must still hold no key
--            puts        key, value, ...
--            deletes     key, ...
--            increments  counter, delta, ... (deltas as decimal strings)
-- ARGV[2]  this commit's attempt key: a retry of an attempt whose reply was lost finds its
--          outcome there instead of applying the batch twice or reporting its own change as a conflict
-- ARGV[3]  how long (ms) an attempt's outcome is kept
-- ARGV[4]  prefix of the index keys: one sorted set of keys per tag byte, for ordered scans
-- ARGV[5]  prefix of the counter keys
-- ARGV[6]  the channel on which the keys a batch changed are published
-- ARGV[7]  the committing client's origin id, published with them so it can skip its own notices
-- ARGV[8]  the client's write mark: the number of its latest write, so that it notices when the
--          server lost writes it had acknowledged (a failover to a replica that never received them)
-- ARGV[9]  the number of this write: one more than the client's previous one
--
-- Returns "!" when a read or empty range no longer holds (nothing changed), else a msgpack array:
-- the counters' new values (decimal strings, in the order of increments), and 1 when the write mark
-- did not hold the previous write's number (writes of this client were lost), else 0.

local CONFLICT = '!'
local outcome = redis.call('GET', ARGV[2])
if outcome then
  return outcome
end

local batch = cmsgpack.unpack(ARGV[1])
local reads, absent, empty, puts, deletes, increments =
  batch[1], batch[2], batch[3], batch[4], batch[5], batch[6]
local writes = #puts + #deletes + #increments > 0

local function index(key)
  return ARGV[4] .. string.sub(key, 1, 1)
end

local function holds()
  for i = 1, #reads, 2 do
    if redis.call('GET', reads[i]) ~= reads[i + 1] then
      return false
    end
  end
  for _, key in ipairs(absent) do
    if redis.call('EXISTS', key) == 1 then
      return false
    end
  end
  for _, prefix in ipairs(empty) do
    local first = redis.call('ZRANGEBYLEX', index(prefix), '[' .. prefix, '+', 'LIMIT', 0, 1)[1]
    if first and string.sub(first, 1, #prefix) == prefix then
      return false
    end
  end
  return true
end

local function decided(result)
  if writes then
    redis.call('SET', ARGV[2], result, 'PX', ARGV[3])
  end
  return result
end

if not holds() then
  return decided(CONFLICT)
end

-- Increments first: INCRBY is the one write that can fail (a total beyond 64 bits), and Redis
-- keeps what a failing script wrote before.
local totals = {}
for i = 1, #increments, 2 do
  local counter = ARGV[5] .. increments[i]
  redis.call('INCRBY', counter, increments[i + 1])
  totals[#totals + 1] = redis.call('GET', counter)
end
local changed = {}
for i = 1, #puts, 2 do
  redis.call('SET', puts[i], puts[i + 1])
  redis.call('ZADD', index(puts[i]), 0, puts[i])
  changed[#changed + 1] = puts[i]
end
for _, key in ipairs(deletes) do
  redis.call('DEL', key)
  redis.call('ZREM', index(key), key)
  changed[#changed + 1] = key
end
if #changed > 0 then
  redis.call('PUBLISH', ARGV[6], cmsgpack.pack({ARGV[7], changed}))
end
local lost = 0
if writes then
  if tonumber(redis.call('GET', ARGV[8]) or '0') ~= tonumber(ARGV[9]) - 1 then
    lost = 1
  end
  redis.call('SET', ARGV[8], ARGV[9])
end
return decided(cmsgpack.pack({totals, lost}))
