/*
 * The functions of ffi.h, each a thin wrapper over BoringSSL or zlib,
 * compiled by build.rs against the headers of the very libraries the binary
 * links: BoringSSL's include/ from the boringssl-src crate grpcio-sys builds,
 * and the zlib.h of libz-sys. A library change that breaks a call here is a
 * build error (build.rs makes the warnings that flag mismatched types
 * errors), not undefined behaviour at run time.
 *
 * Only API that BoringSSL and OpenSSL (1.1.1 and 3) both have is used, so
 * that a build against a system's OpenSSL can compile this file too; where
 * their declarations differ, a comment says how.
 */
#include "ffi.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <zlib.h>

/* build.rs defines CSI_FFI_BORINGSSL when it points the include path at
 * BoringSSL's headers: refuse others found first (a system's OpenSSL in
 * /usr/include), as their symbols are not the ones linked. */
#if defined(CSI_FFI_BORINGSSL) && !defined(OPENSSL_IS_BORINGSSL)
#error "the OpenSSL headers found are not BoringSSL's, which the build links"
#endif
/* And CSI_FFI_SYSTEM_OPENSSL when the build links the system's gRPC core
 * and OpenSSL (GRPCIO_SYS_USE_PKG_CONFIG=1): refuse BoringSSL's headers
 * there. */
#if defined(CSI_FFI_SYSTEM_OPENSSL) && defined(OPENSSL_IS_BORINGSSL)
#error "the OpenSSL headers found are BoringSSL's, but the build links the system's OpenSSL"
#endif

/* ---- TLS client connections ------------------------------------------ */

struct csi_tls {
    SSL_CTX *ctx;
    /* NULL until csi_tls_new_session. */
    SSL *ssl;
};

csi_tls *csi_tls_new(void) {
    csi_tls *tls = calloc(1, sizeof(*tls));
    if (tls == NULL) {
        return NULL;
    }
    /* TLS_client_method: OpenSSL 1.1.0 and later, and BoringSSL. */
    tls->ctx = SSL_CTX_new(TLS_client_method());
    if (tls->ctx == NULL) {
        free(tls);
        return NULL;
    }
    return tls;
}

void csi_tls_free(csi_tls *tls) {
    if (tls == NULL) {
        return;
    }
    /* The session holds its own reference to the context. */
    SSL_free(tls->ssl);
    SSL_CTX_free(tls->ctx);
    free(tls);
}

int csi_tls_trust_cas(csi_tls *tls, const char *ca_file) {
    if (SSL_CTX_load_verify_locations(tls->ctx, ca_file, NULL) != 1) {
        return 0;
    }
    SSL_CTX_set_verify(tls->ctx, SSL_VERIFY_PEER, NULL);
    return 1;
}

int csi_tls_new_session(csi_tls *tls) {
    if (tls->ssl != NULL) {
        return 0;
    }
    tls->ssl = SSL_new(tls->ctx);
    return tls->ssl != NULL;
}

int csi_tls_set_fd(csi_tls *tls, int fd) {
    if (tls->ssl == NULL) {
        return 0;
    }
    return SSL_set_fd(tls->ssl, fd) == 1;
}

int csi_tls_expect_host(csi_tls *tls, const char *host) {
    if (tls->ssl == NULL) {
        return 0;
    }
    /* A function in BoringSSL; in OpenSSL a macro over SSL_ctrl. Without
     * SNI a server may answer with another name's certificate, which the
     * name check below refuses: its result is that check's. */
    (void)SSL_set_tlsext_host_name(tls->ssl, host);
    /* SSL_set1_host: OpenSSL 1.1.0 and later, and BoringSSL. */
    return SSL_set1_host(tls->ssl, host) == 1;
}

int csi_tls_expect_ip(csi_tls *tls, const char *ip) {
    if (tls->ssl == NULL) {
        return 0;
    }
    /* Declared in x509.h by BoringSSL, in x509_vfy.h (which x509.h
     * includes) by OpenSSL. */
    return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(tls->ssl), ip) == 1;
}

int csi_tls_handshake(csi_tls *tls) {
    if (tls->ssl == NULL) {
        return -1;
    }
    return SSL_connect(tls->ssl);
}

const char *csi_tls_verify_failure(const csi_tls *tls) {
    if (tls->ssl == NULL) {
        return NULL;
    }
    long result = SSL_get_verify_result(tls->ssl);
    if (result == X509_V_OK) {
        return NULL;
    }
    return X509_verify_cert_error_string(result);
}

/* SSL_read and SSL_write take an int count. */
static int clamp_to_int(size_t len) {
    return len > (size_t)INT_MAX ? INT_MAX : (int)len;
}

int csi_tls_read(csi_tls *tls, uint8_t *buf, size_t len) {
    if (tls->ssl == NULL) {
        return -1;
    }
    return SSL_read(tls->ssl, buf, clamp_to_int(len));
}

int csi_tls_write(csi_tls *tls, const uint8_t *buf, size_t len) {
    if (tls->ssl == NULL) {
        return -1;
    }
    return SSL_write(tls->ssl, buf, clamp_to_int(len));
}

int csi_tls_error_kind(const csi_tls *tls, int ret) {
    if (tls->ssl == NULL) {
        return CSI_TLS_ERROR_OTHER;
    }
    int saved = errno;
    int code = SSL_get_error(tls->ssl, ret);
    errno = saved;
    switch (code) {
    case SSL_ERROR_ZERO_RETURN:
        return CSI_TLS_ERROR_ZERO_RETURN;
    case SSL_ERROR_SYSCALL:
        return CSI_TLS_ERROR_SYSCALL;
    default:
        return CSI_TLS_ERROR_OTHER;
    }
}

/* A packed error code: uint32_t in BoringSSL, unsigned long in OpenSSL. */
#if defined(OPENSSL_IS_BORINGSSL)
typedef uint32_t csi_err_code;
#else
typedef unsigned long csi_err_code;
#endif

void csi_tls_pop_error(char *buf, size_t len) {
    csi_err_code code = ERR_get_error();
    /* Returns buf in BoringSSL, nothing in OpenSSL. */
    ERR_error_string_n(code, buf, len);
}

/* ---- Message digests ------------------------------------------------- */

_Static_assert(CSI_DIGEST_MAX_SIZE >= EVP_MAX_MD_SIZE,
               "CSI_DIGEST_MAX_SIZE holds no library digest");

struct csi_digest {
    EVP_MD_CTX *ctx;
};

csi_digest *csi_digest_new(const char *algorithm) {
    const EVP_MD *md;
    if (strcmp(algorithm, "md5") == 0) {
        md = EVP_md5();
    } else if (strcmp(algorithm, "sha1") == 0) {
        md = EVP_sha1();
    } else if (strcmp(algorithm, "sha256") == 0) {
        md = EVP_sha256();
    } else if (strcmp(algorithm, "sha512") == 0) {
        md = EVP_sha512();
    } else {
        return NULL;
    }
    csi_digest *digest = calloc(1, sizeof(*digest));
    if (digest == NULL) {
        return NULL;
    }
    /* EVP_MD_CTX_new: OpenSSL 1.1.0 and later, and BoringSSL. */
    digest->ctx = EVP_MD_CTX_new();
    if (digest->ctx == NULL || EVP_DigestInit_ex(digest->ctx, md, NULL) != 1) {
        csi_digest_free(digest);
        return NULL;
    }
    return digest;
}

void csi_digest_free(csi_digest *digest) {
    if (digest == NULL) {
        return;
    }
    EVP_MD_CTX_free(digest->ctx);
    free(digest);
}

int csi_digest_update(csi_digest *digest, const uint8_t *data, size_t len) {
    return EVP_DigestUpdate(digest->ctx, data, len) == 1;
}

int csi_digest_finish(csi_digest *digest, uint8_t *out, size_t cap, size_t *len) {
    /* The output is uint8_t * in BoringSSL, unsigned char * in OpenSSL. */
    unsigned int written = 0;
    if (cap < EVP_MAX_MD_SIZE || EVP_DigestFinal_ex(digest->ctx, out, &written) != 1) {
        return 0;
    }
    *len = written;
    return 1;
}

/* ---- Inflate --------------------------------------------------------- */

struct csi_inflate {
    /* zlib's state points back at the stream: it stays at this address. */
    z_stream stream;
    /* zlib's last result, for csi_inflate_message. */
    int last;
};

/* 15 bits of window, plus 16 for a gzip header and trailer instead of
 * zlib's, or negated for raw deflate data without any. */
#define GZIP_WINDOW_BITS (15 + 16)
#define RAW_WINDOW_BITS (-15)

csi_inflate *csi_inflate_new(int gzip) {
    csi_inflate *inflater = calloc(1, sizeof(*inflater));
    if (inflater == NULL) {
        return NULL;
    }
    /* A macro passing zlib's version and sizeof(z_stream), which the
     * library checks against its own. Null allocators select zlib's. */
    int ret = inflateInit2(&inflater->stream, gzip ? GZIP_WINDOW_BITS : RAW_WINDOW_BITS);
    if (ret != Z_OK) {
        free(inflater);
        return NULL;
    }
    return inflater;
}

void csi_inflate_free(csi_inflate *inflater) {
    if (inflater == NULL) {
        return;
    }
    (void)inflateEnd(&inflater->stream);
    free(inflater);
}

/* zlib counts in uInt. */
static uInt clamp_to_uint(size_t len) {
    return len > (size_t)UINT_MAX ? UINT_MAX : (uInt)len;
}

int csi_inflate_run(csi_inflate *inflater, const uint8_t *in, size_t *in_len,
                    uint8_t *out, size_t *out_len) {
    z_stream *stream = &inflater->stream;
    uInt avail_in = clamp_to_uint(*in_len);
    uInt avail_out = clamp_to_uint(*out_len);
    /* next_in is z_const: const only where zlib is built with ZLIB_CONST;
     * inflate never writes through it. */
    stream->next_in = (Bytef *)(uintptr_t)in;
    stream->avail_in = avail_in;
    stream->next_out = out;
    stream->avail_out = avail_out;
    int ret = inflate(stream, Z_NO_FLUSH);
    inflater->last = ret;
    *in_len = avail_in - stream->avail_in;
    *out_len = avail_out - stream->avail_out;
    stream->next_in = NULL;
    stream->next_out = NULL;
    switch (ret) {
    case Z_OK:
        return CSI_INFLATE_OK;
    case Z_STREAM_END:
        return CSI_INFLATE_END;
    case Z_BUF_ERROR:
        return CSI_INFLATE_STALLED;
    default:
        return CSI_INFLATE_ERROR;
    }
}

int csi_inflate_reset(csi_inflate *inflater) {
    inflater->last = inflateReset(&inflater->stream);
    return inflater->last == Z_OK ? CSI_INFLATE_OK : CSI_INFLATE_ERROR;
}

const char *csi_inflate_message(const csi_inflate *inflater) {
    if (inflater->stream.msg != NULL) {
        return inflater->stream.msg;
    }
    return zError(inflater->last);
}

uint32_t csi_crc32(uint32_t crc, const uint8_t *data, size_t len) {
    uLong value = crc;
    while (len > 0) {
        uInt chunk = clamp_to_uint(len);
        value = crc32(value, data, chunk);
        data += chunk;
        len -= chunk;
    }
    return (uint32_t)value;
}
