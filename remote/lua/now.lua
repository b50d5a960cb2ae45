-- now.lua: the start of every entry point: NOW, Redis TIME in us, read
-- once; no other clock is read.
do
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
