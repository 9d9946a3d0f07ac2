-- HMAC-SHA256 and SHA-256 through LuaJIT's FFI to OpenSSL's libcrypto (the library nginx
-- itself links), for the nginx + Lua benchmark peer (benches/peers/nginx-lua/README.md).
--
-- Each app's HMAC key schedule (the inner and outer padded-key digests) is done once, in a
-- template HMAC_CTX per app; a request copies its app's template into one reusable working
-- context, feeds the string-to-sign and finishes: the same work a gateway that keeps a
-- `SigningKey` per app does (docs/PROTOCOL.md, "Signing a request").

local ffi = require("ffi")
local bit = require("bit")

ffi.cdef([[
typedef struct hmac_ctx_st HMAC_CTX;
typedef struct evp_md_st EVP_MD;
typedef struct engine_st ENGINE;
typedef struct ossl_lib_ctx_st OSSL_LIB_CTX;
const EVP_MD *EVP_sha256(void);
EVP_MD *EVP_MD_fetch(OSSL_LIB_CTX *ctx, const char *algorithm, const char *properties);
HMAC_CTX *HMAC_CTX_new(void);
int HMAC_Init_ex(HMAC_CTX *ctx, const void *key, int len, const EVP_MD *md, ENGINE *impl);
int HMAC_CTX_copy(HMAC_CTX *dctx, HMAC_CTX *sctx);
int HMAC_Update(HMAC_CTX *ctx, const unsigned char *data, size_t len);
int HMAC_Final(HMAC_CTX *ctx, unsigned char *md, unsigned int *len);
int EVP_Digest(const void *data, size_t count, unsigned char *md, unsigned int *size,
               const EVP_MD *type, ENGINE *impl);
int CRYPTO_memcmp(const void *a, const void *b, size_t len);
]])

local _M = {}

local lib
local md -- SHA-256, fetched once (an implicit fetch per call costs a lock and a lookup)
local work -- the per-worker HMAC_CTX a request's MAC is computed in
local out = ffi.new("unsigned char[32]")
local outlen = ffi.new("unsigned int[1]")
local hexbuf = ffi.new("unsigned char[64]")
local HEX = ffi.new("const unsigned char[16]", { 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 97, 98, 99, 100, 101, 102 })
local band, rshift = bit.band, bit.rshift

--- Loads libcrypto (`soname`, e.g. "libcrypto.so.3") and prepares the working context.
function _M.init(soname)
    lib = ffi.load(soname)
    md = lib.EVP_MD_fetch(nil, "SHA256", nil)
    if md == nil then
        md = lib.EVP_sha256()
    end
    work = lib.HMAC_CTX_new()
    assert(work ~= nil, "HMAC_CTX_new failed")
end

--- A key template: an HMAC_CTX initialised with `secret` (the key schedule, done once).
function _M.key(secret)
    local ctx = lib.HMAC_CTX_new()
    assert(ctx ~= nil, "HMAC_CTX_new failed")
    assert(lib.HMAC_Init_ex(ctx, secret, #secret, md, nil) == 1, "HMAC_Init_ex failed")
    return ctx
end

local function hex_out()
    for i = 0, 31 do
        local b = out[i]
        hexbuf[2 * i] = HEX[rshift(b, 4)]
        hexbuf[2 * i + 1] = HEX[band(b, 15)]
    end
end

--- Whether lowercase-hex HMAC(template's key, msg) equals `sig_lower` (64 lowercase hex
--- characters), compared in constant time.
function _M.verify(template, msg, sig_lower)
    if lib.HMAC_CTX_copy(work, template) ~= 1 then
        return false
    end
    lib.HMAC_Update(work, msg, #msg)
    lib.HMAC_Final(work, out, outlen)
    hex_out()
    return lib.CRYPTO_memcmp(hexbuf, sig_lower, 64) == 0
end

--- Lowercase hex HMAC(template's key, msg) (the check's debug and error messages).
function _M.sign(template, msg)
    lib.HMAC_CTX_copy(work, template)
    lib.HMAC_Update(work, msg, #msg)
    lib.HMAC_Final(work, out, outlen)
    hex_out()
    return ffi.string(hexbuf, 64)
end

--- Lowercase hex SHA-256 of `data` (a Lua string).
function _M.sha256_hex(data)
    lib.EVP_Digest(data, #data, out, outlen, md, nil)
    hex_out()
    return ffi.string(hexbuf, 64)
end

return _M
