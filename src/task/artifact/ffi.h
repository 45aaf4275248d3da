/*
 * The C side of the artifact fetcher: TLS client connections and message
 * digests through the TLS library gRPC links (BoringSSL), inflate and CRC-32
 * through zlib.
 *
 * These are the only C functions the Rust code declares (ffi.rs mirrors this
 * file). ffi.c defines them against the libraries' own headers, so the C
 * compiler checks every call into BoringSSL and zlib; and ffi.c includes this
 * file, so it checks these prototypes against their definitions too. The
 * API is our own and narrow: opaque handles, plain integers, byte buffers
 * with their lengths, and no structure whose layout Rust would have to copy
 * from a library's header.
 *
 * Handles may be used in any order: a call that needs a step not yet done
 * (reading before a session exists, say) fails instead of crashing.
 */
#ifndef CSI_AGENT_ARTIFACT_FFI_H
#define CSI_AGENT_ARTIFACT_FFI_H

#include <stddef.h>
#include <stdint.h>

/* ---- TLS client connections ------------------------------------------ */

/* A client context (the CAs its peers are verified against) and, once
 * started, one session on one socket. */
typedef struct csi_tls csi_tls;

/* What csi_tls_error_kind says about a call that failed: */
/* a failure whose reason is in this thread's error queue; */
#define CSI_TLS_ERROR_OTHER 0
/* the peer closed the TLS session with close_notify; */
#define CSI_TLS_ERROR_ZERO_RETURN 1
/* the socket failed (errno says how), or closed without close_notify
 * (errno is 0). */
#define CSI_TLS_ERROR_SYSCALL 2

/* A client context without a session; NULL on failure (error queued). */
csi_tls *csi_tls_new(void);
/* Frees the session, then the context. NULL is ignored. */
void csi_tls_free(csi_tls *tls);
/* Verifies peers against the CAs of the PEM file ca_file, and refuses a
 * peer that does not verify. 1 on success, 0 on failure (error queued). */
int csi_tls_trust_cas(csi_tls *tls, const char *ca_file);
/* Starts the session. 1 on success, 0 on failure (error queued). */
int csi_tls_new_session(csi_tls *tls);
/* The session speaks over the connected socket fd, which stays open until
 * csi_tls_free. 1 on success, 0 on failure. */
int csi_tls_set_fd(csi_tls *tls, int fd);
/* Sends host as the server name (SNI) and requires the peer's
 * certificate to name it. 1 on success, 0 on failure. */
int csi_tls_expect_host(csi_tls *tls, const char *host);
/* Requires the peer's certificate to name the IP address ip (text, v4 or
 * v6). 1 on success, 0 on failure. */
int csi_tls_expect_ip(csi_tls *tls, const char *ip);
/* The client handshake, blocking on the socket. 1 on success; otherwise
 * see csi_tls_verify_failure, then csi_tls_error_kind. */
int csi_tls_handshake(csi_tls *tls);
/* Why the peer's certificate did not verify (a static string), or NULL if
 * it did or was not checked. */
const char *csi_tls_verify_failure(const csi_tls *tls);
/* Reads at most len bytes (at most INT_MAX) into buf. The count read, or
 * <= 0 on failure: see csi_tls_error_kind. */
int csi_tls_read(csi_tls *tls, uint8_t *buf, size_t len);
/* Writes at most len bytes (at most INT_MAX) of buf. The count written, or
 * <= 0 on failure: see csi_tls_error_kind. */
int csi_tls_write(csi_tls *tls, const uint8_t *buf, size_t len);
/* What a call that returned ret means: one of CSI_TLS_ERROR_*. Leaves
 * errno alone. */
int csi_tls_error_kind(const csi_tls *tls, int ret);
/* Pops the oldest error of this thread's error queue and writes its text,
 * NUL-terminated, into buf (len > 0 bytes). */
void csi_tls_pop_error(char *buf, size_t len);

/* ---- Message digests ------------------------------------------------- */

/* A digest being computed. */
typedef struct csi_digest csi_digest;

/* The largest digest, in bytes (SHA-512's). */
#define CSI_DIGEST_MAX_SIZE 64

/* A digest of the algorithm named "md5", "sha1", "sha256" or "sha512";
 * NULL for another name or on failure. */
csi_digest *csi_digest_new(const char *algorithm);
/* NULL is ignored. */
void csi_digest_free(csi_digest *digest);
/* Adds len bytes of data. 1 on success, 0 on failure. */
int csi_digest_update(csi_digest *digest, const uint8_t *data, size_t len);
/* Writes the digest into out, which holds cap >= CSI_DIGEST_MAX_SIZE
 * bytes, and its length into *len. 1 on success, 0 on failure. */
int csi_digest_finish(csi_digest *digest, uint8_t *out, size_t cap, size_t *len);

/* ---- Inflate --------------------------------------------------------- */

/* A deflate stream being inflated. */
typedef struct csi_inflate csi_inflate;

/* What csi_inflate_run returns: */
/* progress was made; more input or output space is needed; */
#define CSI_INFLATE_OK 0
/* the stream (a gzip member) ended; */
#define CSI_INFLATE_END 1
/* no progress was possible with this input and output space; */
#define CSI_INFLATE_STALLED 2
/* the data is not valid (see csi_inflate_message). */
#define CSI_INFLATE_ERROR 3

/* A gzip stream's inflater (gzip non-zero: header and trailer checked) or
 * raw deflate data's (gzip 0: a zip entry's); NULL on failure. */
csi_inflate *csi_inflate_new(int gzip);
/* NULL is ignored. */
void csi_inflate_free(csi_inflate *inflate);
/* Inflates from in (*in_len bytes) into out (*out_len bytes), and sets
 * *in_len and *out_len to the bytes used. One of CSI_INFLATE_*. */
int csi_inflate_run(csi_inflate *inflate, const uint8_t *in, size_t *in_len,
                    uint8_t *out, size_t *out_len);
/* Makes the inflater ready for another stream (the next gzip member).
 * CSI_INFLATE_OK or CSI_INFLATE_ERROR. */
int csi_inflate_reset(csi_inflate *inflate);
/* The last error, as text (a static string). */
const char *csi_inflate_message(const csi_inflate *inflate);
/* crc (0 to start) carried over len bytes of data: zip's CRC-32. */
uint32_t csi_crc32(uint32_t crc, const uint8_t *data, size_t len);

#endif
