-- The nginx + Lua benchmark peer: per request, the work Portico's signed edge does
-- (benches/peers/nginx-lua/README.md), in the way an nginx + Lua gateway (APISIX, Kong)
-- would do it: IP deny/allow list, routing by path prefix, body read, the four signature
-- headers, timestamp window, HMAC-SHA256 over the string-to-sign with the canonical query
-- (docs/PROTOCOL.md, "Signing a request"), a nonce replay cache in a shared dict, app
-- status and grant, rate limits counted on every request, then keep-alive proxy_pass.
--
-- The apps, APIs, clusters and IP lists come from `portico_peer_config` (a Lua table the
-- benchmark harness generates from the same configuration tree it gives Portico).

local crypto = require("portico_peer_crypto")

local ngx = ngx
local var = ngx.var
local req = ngx.req
local get_headers = req.get_headers
local byte, sub, find, lower, gsub, format, char =
    string.byte, string.sub, string.find, string.lower, string.gsub, string.format, string.char
local floor, ceil, abs = math.floor, math.ceil, math.abs
local concat, sort = table.concat, table.sort
local tonumber, type = tonumber, type

local _M = {}

local cfg
local nonces, limits -- shared dicts
local apps = {} -- app key -> { key = HMAC template, active, all, grants = {api id = true}, limits }
local unknown_key -- the HMAC template an unknown app key's call is checked against
local exact = {} -- literal path -> routes
local prefixed = {} -- literal prefix ending in "/" -> routes
local deny4, allow4, deny6, allow6

local EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
local MAPPED_PREFIX = "\0\0\0\0\0\0\0\0\0\0\255\255"

-- Routing ---------------------------------------------------------------------------------

-- One path-template segment: { lit = "orders" } | { var = "id", verb = ":touch"? } | { rest = "name" }.
local function compile_segment(s)
    local name = s:match("^{([%w_]+)}$") or s:match("^{([%w_]+)=%*}$")
    if name then
        return { var = name }
    end
    name = s:match("^{([%w_]+)=%*%*}$")
    if name then
        return { rest = name }
    end
    local vname, verb = s:match("^{([%w_]+)}(:[%w_%-]+)$")
    if vname then
        return { var = vname, verb = verb }
    end
    assert(not find(s, "{", 1, true), "unsupported path template segment " .. s)
    return { lit = s }
end

local function compile_rewrite(template)
    local parts = {}
    local pos = 1
    while true do
        local s, e, name = find(template, "{([%w_]+)[^}]*}", pos)
        if not s then
            parts[#parts + 1] = sub(template, pos)
            break
        end
        parts[#parts + 1] = sub(template, pos, s - 1)
        parts[#parts + 1] = { name = name }
        pos = e + 1
    end
    return parts
end

local function add_route(r)
    local segs = {}
    for s in string.gmatch(r.path, "/([^/]*)") do
        segs[#segs + 1] = compile_segment(s)
    end
    local lits = {}
    local first_var
    for i, s in ipairs(segs) do
        if not s.lit then
            first_var = i
            break
        end
        lits[#lits + 1] = s.lit
    end
    local route = {
        id = r.id,
        method = r.method,
        upstream = r.upstream,
        rewrite = r.rewrite and compile_rewrite(r.rewrite),
        limits = r.limits or {},
        tail = {},
    }
    if not first_var then
        local list = exact[r.path] or {}
        list[#list + 1] = route
        exact[r.path] = list
        return
    end
    for i = first_var, #segs do
        route.tail[#route.tail + 1] = segs[i]
    end
    local prefix = "/" .. concat(lits, "/") .. (#lits > 0 and "/" or "")
    local list = prefixed[prefix] or {}
    list[#list + 1] = route
    prefixed[prefix] = list
end

-- Matches `rest` (the path after the prefix) against a route's tail; returns the captures.
local function match_tail(tail, rest)
    local vars = {}
    local pos = 1
    local n = #tail
    for i = 1, n do
        local seg = tail[i]
        if seg.rest then
            vars[seg.rest] = sub(rest, pos)
            return vars
        end
        if pos > #rest + 1 then
            return nil
        end
        local slash = find(rest, "/", pos, true)
        local piece = sub(rest, pos, (slash or 0) - 1)
        if slash and i == n then
            return nil
        end
        if not slash and i < n then
            return nil
        end
        if seg.lit then
            if piece ~= seg.lit then
                return nil
            end
        else
            if seg.verb then
                local vl = #seg.verb
                if #piece <= vl or sub(piece, -vl) ~= seg.verb then
                    return nil
                end
                piece = sub(piece, 1, -vl - 1)
            elseif find(piece, ":", 1, true) and i == n then
                -- a custom verb belongs to another API's template
                return nil
            end
            if piece == "" then
                return nil
            end
            vars[seg.var] = piece
        end
        pos = (slash or #rest) + 1
    end
    return vars
end

local function pick(list, method, rest)
    for i = 1, #list do
        local r = list[i]
        if r.method == method or r.method == "*" then
            if not rest then
                return r, nil
            end
            local vars = match_tail(r.tail, rest)
            if vars then
                return r, vars
            end
        end
    end
end

local function route(method, path)
    local list = exact[path]
    if list then
        local r = pick(list, method, nil)
        if r then
            return r, nil
        end
    end
    -- Longest literal prefix first, at each "/" boundary.
    local i = #path
    while i >= 1 do
        if byte(path, i) == 47 then
            list = prefixed[sub(path, 1, i)]
            if list then
                local r, vars = pick(list, method, sub(path, i + 1))
                if r then
                    return r, vars
                end
            end
        end
        i = i - 1
    end
end

local function rewrite(parts, vars)
    if #parts == 1 then
        return parts[1]
    end
    local out = {}
    for i = 1, #parts do
        local p = parts[i]
        out[i] = type(p) == "table" and (vars[p.name] or "") or p
    end
    return concat(out)
end

-- IP lists --------------------------------------------------------------------------------

-- Whether `x` (a number for IPv4, a 16-byte string for IPv6) is in the sorted, disjoint
-- ranges `set` ({ lo = {...}, hi = {...} }): a binary search.
local function in_ranges(set, x)
    local lo, hi = set.lo, set.hi
    local a, b = 1, #lo
    while a <= b do
        local m = floor((a + b) / 2)
        if x < lo[m] then
            b = m - 1
        elseif x > hi[m] then
            a = m + 1
        else
            return true
        end
    end
    return false
end

local function ip_blocked(bin)
    local v4
    if #bin == 4 then
        local a, b, c, d = byte(bin, 1, 4)
        v4 = ((a * 256 + b) * 256 + c) * 256 + d
    elseif #bin == 16 and sub(bin, 1, 12) == MAPPED_PREFIX then
        local a, b, c, d = byte(bin, 13, 16)
        v4 = ((a * 256 + b) * 256 + c) * 256 + d
    end
    if v4 then
        if in_ranges(deny4, v4) then
            return true
        end
        return (#allow4.lo > 0 or #allow6.lo > 0) and not in_ranges(allow4, v4)
    end
    if in_ranges(deny6, bin) then
        return true
    end
    return (#allow4.lo > 0 or #allow6.lo > 0) and not in_ranges(allow6, bin)
end

-- Canonical query (docs/PROTOCOL.md, "Signing a request") --------------------------------

local function hex_byte(h)
    return char(tonumber(h, 16))
end

local function enc_byte(c)
    return format("%%%02X", byte(c))
end

local function reencode(s)
    s = gsub(s, "%%(%x%x)", hex_byte) -- "%XX" only; "+" stays "+"; a bad escape stays as is
    return (gsub(s, "[^A-Za-z0-9%-_%.~]", enc_byte))
end

local function pair_less(x, y)
    if x[1] ~= y[1] then
        return x[1] < y[1]
    end
    return x[2] < y[2]
end

local function canonical_query(raw)
    if raw == nil or raw == "" then
        return ""
    end
    local pairs_ = {}
    for part in string.gmatch(raw, "[^&]+") do
        local eq = find(part, "=", 1, true)
        local name, value
        if eq then
            name, value = sub(part, 1, eq - 1), sub(part, eq + 1)
        else
            name, value = part, ""
        end
        pairs_[#pairs_ + 1] = { reencode(name), reencode(value) }
    end
    sort(pairs_, pair_less)
    local out = {}
    for i = 1, #pairs_ do
        out[i] = pairs_[i][1] .. "=" .. pairs_[i][2]
    end
    return concat(out, "&")
end
_M.canonical_query = canonical_query

-- Answers ---------------------------------------------------------------------------------

local function answer(status, code, message, request_id, retry_after)
    ngx.status = status
    local h = ngx.header
    h["Content-Type"] = "application/json"
    if retry_after then
        h["Retry-After"] = retry_after
    end
    ngx.print('{"code":"', code, '","message":"', message, '","request_id":"', request_id, '"}')
    return ngx.exit(status)
end

local function valid_request_id(v)
    return type(v) == "string" and #v >= 1 and #v <= 64 and not find(v, "[^%w%._%-]")
end

-- Rate limits: fixed windows counted in a shared dict, on every request --------------------

local function limit_key(rule, app_key, ip, api_id, headers)
    local parts = rule.key
    if #parts == 1 then
        local p = parts[1]
        if p == "app" then
            return app_key
        elseif p == "ip" then
            return ip
        elseif p == "api" then
            return api_id
        end
    end
    local out = {}
    for i = 1, #parts do
        local p = parts[i]
        if p == "app" then
            out[i] = app_key
        elseif p == "ip" then
            out[i] = ip
        elseif p == "api" then
            out[i] = api_id
        else
            local hv = headers[p]
            out[i] = type(hv) == "table" and hv[1] or hv or ""
        end
    end
    return concat(out, "|")
end

-- Counts the request against `rules` (id prefix `tag`); returns the seconds to wait when
-- one of them is over its limit.
local function over_limit(rules, tag, now, app_key, ip, api_id, headers)
    for i = 1, #rules do
        local rule = rules[i]
        local per = rule.per
        local window = floor(now / per)
        local key = tag .. i .. "|" .. limit_key(rule, app_key, ip, api_id, headers) .. "|" .. window
        local n, err = limits:incr(key, 1, 0, per + 1)
        if not n then
            ngx.log(ngx.ERR, "rate limit counter: ", err)
        elseif n > rule.limit then
            return ceil((window + 1) * per - now)
        end
    end
end

-- The request phase ------------------------------------------------------------------------

function _M.access()
    local headers = get_headers(100)
    local rid = headers["x-portico-request-id"]
    if not valid_request_id(rid) then
        rid = var.request_id
    end
    var.portico_request_id = rid

    -- ip_acl
    if ip_blocked(var.binary_remote_addr) then
        return answer(403, "IP_BLOCKED", "the caller's address is denied", rid)
    end

    -- route (the path exactly as sent on the request line, without the query)
    local method = req.get_method()
    local uri = var.request_uri
    local q = find(uri, "?", 1, true)
    local path, query
    if q then
        path, query = sub(uri, 1, q - 1), sub(uri, q + 1)
    else
        path = uri
    end
    local api, vars = route(method, path)
    if not api then
        return answer(404, "API_NOT_FOUND", "no API at this method and path", rid)
    end

    -- body
    req.read_body()
    local body = req.get_body_data()
    if body == nil then
        local file = req.get_body_file()
        if file then
            local f = assert(io.open(file, "rb"))
            body = f:read("*a")
            f:close()
        end
    end

    -- auth: the four headers
    local app_key = headers["x-portico-appkey"]
    local ts = headers["x-portico-timestamp"]
    local nonce = headers["x-portico-nonce"]
    local sig = headers["x-portico-signature"]
    if not app_key or not ts or not nonce or not sig or app_key == "" or ts == "" or nonce == ""
        or sig == "" then
        return answer(401, "SIGNATURE_MISSING", "a signature header is missing", rid)
    end
    if type(app_key) == "table" or type(ts) == "table" or type(nonce) == "table"
        or type(sig) == "table" then
        return answer(401, "SIGNATURE_INVALID", "a signature header is sent more than once", rid)
    end
    -- timestamp window
    local now = ngx.now()
    local ts_ms = #ts <= 16 and not find(ts, "%D") and tonumber(ts)
    if not ts_ms or (cfg.window_ms and abs(ts_ms - now * 1000) > cfg.window_ms) then
        return answer(401, "SIGNATURE_EXPIRED", "the timestamp is outside the window", rid)
    end
    if #nonce < 8 or #nonce > 64 or find(nonce, "[^%w_%-]") then
        return answer(401, "SIGNATURE_INVALID", "malformed nonce", rid)
    end
    -- HMAC over the string-to-sign; an unknown app costs the same HMAC
    local app = apps[app_key]
    local sts = method .. "\n" .. path .. "\n" .. canonical_query(query) .. "\n" .. app_key
        .. "\n" .. ts .. "\n" .. nonce .. "\n"
        .. ((body == nil or body == "") and EMPTY_SHA256 or crypto.sha256_hex(body))
    local ok = #sig == 64 and crypto.verify(app and app.key or unknown_key, sts, lower(sig))
    if not ok or not app then
        return answer(401, "SIGNATURE_INVALID", "signature does not match", rid)
    end
    -- replay cache: recorded only once the signature verified, for as long as the
    -- timestamp stays inside the window
    local ttl = cfg.window_ms and (ts_ms + cfg.window_ms) / 1000 - now or 300
    if ttl < 0.001 then
        ttl = 0.001
    end
    local added, err = nonces:safe_add(app_key .. " " .. nonce, true, ttl)
    if not added then
        if err == "exists" then
            return answer(401, "NONCE_REPLAYED", "this nonce was already used", rid)
        end
        -- The cache is full (never evicted early, so a replay can never slip in).
        return answer(429, "RATE_LIMITED", "too many signed calls within the replay window",
            rid, 1)
    end

    -- permit
    if not app.active then
        return answer(403, "APP_DISABLED", "this app is disabled", rid)
    end
    if not app.all and not app.grants[api.id] then
        return answer(403, "APP_FORBIDDEN", "this app is not granted this API", rid)
    end

    -- rate limits: the app's own, then the API's
    local ip = var.remote_addr
    local wait = over_limit(app.limits, "a", now, app_key, ip, api.id, headers)
        or over_limit(api.limits, api.id, now, app_key, ip, api.id, headers)
    if wait then
        return answer(429, "RATE_LIMITED", "a rate limit was hit", rid, wait)
    end

    -- proxy_pass: the API's cluster, its backend path, the query as sent
    var.portico_app = app_key
    var.portico_upstream = api.upstream
    local target = api.rewrite and rewrite(api.rewrite, vars) or path
    var.portico_uri = query and (target .. "?" .. query) or target
end

-- Set-up ------------------------------------------------------------------------------------

local function ranges(list)
    local lo, hi = {}, {}
    for i, r in ipairs(list or {}) do
        lo[i], hi[i] = r[1], r[2]
    end
    return { lo = lo, hi = hi }
end

--- init_by_lua: compiles the configuration (routes, IP ranges).
function _M.init(config)
    cfg = config
    assert(pcall(require, "ffi"), "this LuaJIT has no FFI")
    for _, r in ipairs(cfg.routes) do
        add_route(r)
    end
    deny4, allow4 = ranges(cfg.deny4), ranges(cfg.allow4)
    deny6, allow6 = ranges(cfg.deny6), ranges(cfg.allow6)
end

--- init_worker_by_lua: loads libcrypto and does each app's key schedule.
function _M.init_worker()
    crypto.init(cfg.libcrypto)
    nonces = ngx.shared.portico_nonces
    limits = ngx.shared.portico_limits
    unknown_key = crypto.key("unknown-app-" .. tostring(ngx.worker.pid()))
    for key, a in pairs(cfg.apps) do
        local grants = {}
        local all = false
        for _, id in ipairs(a.apis) do
            if id == "*" then
                all = true
            end
            grants[id] = true
        end
        apps[key] = {
            key = crypto.key(a.secret),
            active = a.status ~= "disabled",
            all = all,
            grants = grants,
            limits = a.limits or {},
        }
    end
end

return _M
