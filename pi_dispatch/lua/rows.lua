--[[
  Many hashes in one command, for a reader of thousands of rows: a pipeline of as many HGETALLs costs the client
  several times more to pack and parse than the store to answer, and one JSON text per call is parsed in C.

  KEYS   the hashes (at most KEYS_PER_SCRIPT a call, so the store is held a few ms at most)
  Returns: a JSON array with, for each key in order, its fields as an object ({} when it does not exist), or false
  when it is no hash.
]]
local rows = {}
for i, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'hash' then
    local flat = redis.call('HGETALL', key)
    local row = {}
    for at = 1, #flat, 2 do
      row[flat[at]] = flat[at + 1]
    end
    rows[i] = row
  elseif kind == 'none' then
    rows[i] = {}
  else
    rows[i] = false
  end
end
return cjson.encode(rows)
