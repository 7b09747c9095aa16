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
  return 0;
}

int pfring_set_socket_mode(void *ring, int mode) {
  char s[64];
  snprintf(s, sizeof(s), "socket_mode %d", mode);
  note(ring, s);
  return 0;
}

int pfring_set_poll_watermark(void *ring, uint16_t watermark) {
  char s[64];
  snprintf(s, sizeof(s), "poll_watermark %u", watermark);
  note(ring, s);
  return 0;
}

int pfring_set_application_name(void *ring, char *name) {
  char s[128];
  snprintf(s, sizeof(s), "application_name %s", name);
  note(ring, s);
  return 0;
}

int pfring_enable_ring(void *ring) {
  ((struct standin *)ring)->enabled = 1;
  note(ring, "enable_ring");
  return 0;
}

int pfring_recv(void *ring, unsigned char **buffer, unsigned int buffer_len, unsigned char *hdr, uint8_t wait) {
  struct standin *r = ring;
  (void)wait;
  if (!r->enabled || buffer_len != 0)
    return -1; /* vdifrec must enable the ring and ask for zero copy */
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
  if (r->next < r->have)
    return 1;
  struct pollfd p = {.fd = r->fd, .events = POLLIN};
  return poll(&p, 1, (int)wait_duration);
}

int pfring_stats(void *ring, uint64_t *stats) {
  struct standin *r = ring;
  const char *drops = getenv("VDIFREC_STANDIN_DROPS");
  stats[0] = r->received; /* pfring_stat: recv, drop, shunt */
  stats[1] = drops ? strtoull(drops, NULL, 10) : 0;
  stats[2] = 0;
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
