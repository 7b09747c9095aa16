/*
 * A stand-in for libpfring.so, built by tests/test_backends.py, so that vdifrec's PF_RING
 * binding (loading, the calls it makes, the receive loop) is exercised where PF_RING is not
 * installed. It exports the functions vdifrec calls, with PF_RING 8.x's prototypes, and is
 * fed from a UDP socket, read in batches: the "device" name is "udp:PORT". Each datagram (up to
 * 9216 bytes) is wrapped in
 * Ethernet, IPv4 and UDP headers addressed to WIRE_PORT (the environment variable
 * VDIFREC_STANDIN_WIRE_PORT), as PF_RING would hand over a packet from the wire.
 * VDIFREC_STANDIN_DROPS sets the drop count pfring_stats reports; VDIFREC_STANDIN_LOG names a
 * file where the calls made are written at pfring_close.
 * VDIFREC_STANDIN_UNSUPPORTED makes calls answer PF_RING_ERROR_NOT_SUPPORTED (-7), as PF_RING's
 * own modules do for what they lack: "1" for the calls a `pcap:` device lacks (direction,
 * application_name, stats, poll_watermark), or a comma-separated list of those names and
 * socket_mode, poll. VDIFREC_STANDIN_ENABLE_FAILS=CODE makes pfring_enable_ring return CODE.
 * pfring_stats refuses (PF_RING_ERROR_INVALID_ARGUMENT) a pfring_stat that is not 8-byte aligned.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEADROOM 42 /* Ethernet 14 + IPv4 20 + UDP 8 */
#define SLOT 9216     /* a jumbo frame */
#define BATCH 64      /* datagrams fetched per recvmmsg, handed out one per pfring_recv */

#define PF_RING_ERROR_INVALID_ARGUMENT -2
#define PF_RING_ERROR_NOT_SUPPORTED -7

/* pfring.h (PF_RING 8.x) */
typedef struct {
  uint64_t recv;
  uint64_t drop;
  uint64_t shunt;
} pfring_stat;

struct standin {
  int fd;
  uint16_t wire_port;
  uint64_t received;
  int enabled;
  char log[1024];
  int have, next; /* datagrams in the batch, the next one to hand out */
  struct mmsghdr msgs[BATCH];
  struct iovec iov[BATCH];
  unsigned char buf[BATCH][HEADROOM + SLOT];
};

static void note(struct standin *r, const char *what) {
  size_t n = strlen(r->log);
  snprintf(r->log + n, sizeof(r->log) - n, "%s\n", what);
}

/* Whether VDIFREC_STANDIN_UNSUPPORTED names `call` (or is "1" and `call` is one a pcap: device
   lacks). */
static int unsupported(const char *call) {
  const char *v = getenv("VDIFREC_STANDIN_UNSUPPORTED");
  if (v == NULL || *v == '\0')
    return 0;
  if (strcmp(v, "1") == 0)
    v = "direction,application_name,stats,poll_watermark";
  size_t n = strlen(call);
  for (const char *p = v; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, call, n) == 0)
      return 1;
    if (!end)
      break;
    p = end + 1;
  }
  return 0;
}

void *pfring_open(const char *device_name, uint32_t caplen, uint32_t flags) {
  (void)caplen;
  (void)flags;
  if (strncmp(device_name, "udp:", 4) != 0) {
    errno = ENODEV;
    return NULL;
  }
  struct standin *r = calloc(1, sizeof(*r));
  r->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  int big = 64 << 20; /* like PF_RING's own ring of thousands of slots */
  if (setsockopt(r->fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) != 0)
    setsockopt(r->fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)atoi(device_name + 4));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(r->fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    close(r->fd);
    free(r);
    return NULL;
  }
  const char *wire = getenv("VDIFREC_STANDIN_WIRE_PORT");
  r->wire_port = (uint16_t)(wire ? atoi(wire) : 46227);
  note(r, "open");
  return r;
}

int pfring_set_direction(void *ring, int direction) {
  char s[64];
  snprintf(s, sizeof(s), "direction %d", direction);
  note(ring, s);
  return unsupported("direction") ? PF_RING_ERROR_NOT_SUPPORTED : 0;
}

int pfring_set_socket_mode(void *ring, int mode) {
  char s[64];
  snprintf(s, sizeof(s), "socket_mode %d", mode);
  note(ring, s);
  return unsupported("socket_mode") ? PF_RING_ERROR_NOT_SUPPORTED : 0;
}

int pfring_set_poll_watermark(void *ring, uint16_t watermark) {
  char s[64];
  snprintf(s, sizeof(s), "poll_watermark %u", watermark);
  note(ring, s);
  return unsupported("poll_watermark") ? PF_RING_ERROR_NOT_SUPPORTED : 0;
}

int pfring_set_application_name(void *ring, char *name) {
  char s[128];
  snprintf(s, sizeof(s), "application_name %s", name);
  note(ring, s);
  return unsupported("application_name") ? PF_RING_ERROR_NOT_SUPPORTED : 0;
}

int pfring_enable_ring(void *ring) {
  note(ring, "enable_ring");
  const char *fails = getenv("VDIFREC_STANDIN_ENABLE_FAILS");
  if (fails && *fails)
    return atoi(fails);
  ((struct standin *)ring)->enabled = 1;
  return 0;
}

int pfring_recv(void *ring, unsigned char **buffer, unsigned int buffer_len, unsigned char *hdr, uint8_t wait) {
  struct standin *r = ring;
  (void)wait;
  /* vdifrec must enable the ring and ask for zero copy; the codes are PF_RING's. */
  if (!r->enabled)
    return -12; /* PF_RING_ERROR_RING_NOT_ENABLED */
  if (buffer_len != 0)
    return PF_RING_ERROR_INVALID_ARGUMENT;
  /* VDIFREC_STANDIN_RECV_FAILS=CODE: the ring fails with CODE once packets have been read. */
  const char *recv_fails = getenv("VDIFREC_STANDIN_RECV_FAILS");
  if (recv_fails && *recv_fails && r->received > 0)
    return atoi(recv_fails);
  if (r->next == r->have) {
    /* Like PF_RING's own ring, packets are gathered in bulk; one system call per batch. */
    for (int i = 0; i < BATCH; i++) {
      r->iov[i].iov_base = r->buf[i] + HEADROOM;
      r->iov[i].iov_len = SLOT;
      memset(&r->msgs[i].msg_hdr, 0, sizeof(r->msgs[i].msg_hdr));
      r->msgs[i].msg_hdr.msg_iov = &r->iov[i];
      r->msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int got = recvmmsg(r->fd, r->msgs, BATCH, MSG_DONTWAIT, NULL);
    if (got < 0)
      return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    r->have = got;
    r->next = 0;
  }
  ssize_t n = r->msgs[r->next].msg_len;
  unsigned char *p = r->buf[r->next++];
  memset(p, 0, HEADROOM);
  p[12] = 0x08; /* IPv4 */
  p[14] = 0x45;
  uint16_t total = htons((uint16_t)(20 + 8 + n));
  memcpy(p + 16, &total, 2);
  p[22] = 64;
  p[23] = 17; /* UDP */
  uint16_t dport = htons(r->wire_port), ulen = htons((uint16_t)(8 + n));
  memcpy(p + 36, &dport, 2);
  memcpy(p + 38, &ulen, 2);
  uint32_t caplen = (uint32_t)(HEADROOM + n);
  memcpy(hdr + 16, &caplen, 4); /* struct pfring_pkthdr: caplen at 16, len at 20 */
  memcpy(hdr + 20, &caplen, 4);
  *buffer = p;
  r->received++;
  return 1;
}

int pfring_poll(void *ring, unsigned int wait_duration) {
  struct standin *r = ring;
  if (unsupported("poll"))
    return PF_RING_ERROR_NOT_SUPPORTED;
  if (r->next < r->have)
    return 1;
  struct pollfd p = {.fd = r->fd, .events = POLLIN};
  return poll(&p, 1, (int)wait_duration);
}

int pfring_stats(void *ring, pfring_stat *stats) {
  struct standin *r = ring;
  if (unsupported("stats"))
    return PF_RING_ERROR_NOT_SUPPORTED;
  if ((uintptr_t)stats % _Alignof(pfring_stat) != 0)
    return PF_RING_ERROR_INVALID_ARGUMENT; /* the caller's pfring_stat is not aligned */
  const char *drops = getenv("VDIFREC_STANDIN_DROPS");
  stats->recv = r->received;
  stats->drop = drops ? strtoull(drops, NULL, 10) : 0;
  stats->shunt = 0;
  return 0;
}

void pfring_close(void *ring) {
  struct standin *r = ring;
  note(r, "close");
  const char *path = getenv("VDIFREC_STANDIN_LOG");
  if (path) {
    FILE *f = fopen(path, "w");
    if (f) {
      fputs(r->log, f);
      fclose(f);
    }
  }
  close(r->fd);
  free(r);
}
