-- One page of an ordered scan of the metadata KV (aifs.meta.redis_kv): the keys of index KEYS[1]
-- from ARGV[1] to ARGV[2] (ZRANGEBYLEX bounds), at most ARGV[3] of them, and their values, read
-- at one instant.
local keys = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, ARGV[3])
if #keys == 0 then
  return {keys, {}}
end
return {keys, redis.call('MGET', unpack(keys))}
