// SPDX-License-Identifier: GPL-2.0
/* cz_sender: the traffic generator of `crosszone bench forward` (bench/forward.py), an ordinary
 * sender on the generator's veth that needs no BPF test run. Built by `make build`
 * (build/cz_sender) with the host's C compiler.
 *
 *   cz_sender --ifindex N --frame FILE --seconds S [--mode af_xdp|tx_ring|sendmmsg]
 *             [--warmup K]
 *
 * Sends the frame in FILE (raw bytes, Ethernet header first) out of interface N of the calling
 * network namespace, as fast as the kernel takes it:
 *
 * - tx_ring (the default of this program; `bench forward` uses af_xdp): AF_PACKET with a TPACKET_V2 transmit ring and PACKET_QDISC_BYPASS. The
 *   frame is copied into every ring slot once; a round marks every free slot for sending and
 *   issues one send(), so a syscall moves up to a ring's worth of frames, and the kernel builds
 *   each skb with page fragments that point into the ring (no copy of the payload).
 * - sendmmsg: AF_PACKET with PACKET_QDISC_BYPASS, sendmmsg() of 64 frames per call; the kernel
 *   copies each frame into a new skb.
 * - af_xdp: an AF_XDP socket in copy mode (veth has no zero-copy), transmit ring only: the
 *   kernel copies each descriptor's frame from the UMEM into a new skb and hands it to the
 *   driver directly, at most 32 frames per sendto() (the kernel's per-call budget).
 *
 * The header bytes (first HDR_BYTES) of a slot are written again before each send: a receiver
 * that rewrote them in place (the legacy gateway's nftables translation writes the inner source
 * address) must never hand a stale frame to the next round.
 *
 * Protocol with the caller, so that only measured phases are counted: send --warmup frames,
 * print "ready", then for every line read on stdin send for --seconds and print one JSON object:
 * frames sent, send errors, the measured wall time, and the busy time of the CPU it ran on
 * (/proc/stat, which includes the softirq work the sends triggered on that CPU: the veth hands
 * frames to its peer's NAPI on the sending CPU, so the gateway and the sink run there too).
 * The caller pins it to one CPU (sched affinity is inherited).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <linux/if_xdp.h>
#include <net/ethernet.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_FRAME 2048            /* one ring slot: tpacket2 header + a 1514-byte frame */
#define RING_FRAMES 1024          /* slots in the transmit ring */
#define RING_BLOCK 4096           /* bytes per ring block: two slots (a page) */
#define BATCH 64                  /* frames per sendmmsg() */
#define HDR_BYTES 96              /* outer + inner headers, rewritten before each send */
#define XSK_FRAMES 2048           /* UMEM chunks and ring entries of the af_xdp mode */

struct opts {
	int ifindex;
	const char *frame_path;
	double seconds;
	long warmup;
	int mode;
};

enum { MODE_TX_RING, MODE_SENDMMSG, MODE_AF_XDP };
static const char *const MODE_NAMES[] = {"tx_ring", "sendmmsg", "af_xdp"};

static void die(const char *what)
{
	fprintf(stderr, "cz_sender: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void usage(const char *msg)
{
	fprintf(stderr, "cz_sender: %s\nusage: cz_sender --ifindex N --frame FILE --seconds S "
		"[--mode tx_ring|sendmmsg|af_xdp] [--warmup FRAMES]\n", msg);
	exit(2);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Busy nanoseconds of one CPU since boot: /proc/stat's user, nice, system, irq, softirq and
 * steal columns, in USER_HZ (100) ticks. */
static uint64_t cpu_busy_ns(int cpu)
{
	char line[512], want[32];
	FILE *f = fopen("/proc/stat", "r");
	unsigned long long v[8] = {0};

	if (!f)
		die("/proc/stat");
	snprintf(want, sizeof(want), "cpu%d ", cpu);
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, want, strlen(want)))
			continue;
		sscanf(line + strlen(want), "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
		       &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
		fclose(f);
		return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) * 10000000ull;
	}
	fclose(f);
	errno = ENOENT;
	die(want);
	return 0;
}

static size_t read_frame(const char *path, unsigned char *buf)
{
	FILE *f = fopen(path, "rb");
	size_t n;

	if (!f)
		die(path);
	n = fread(buf, 1, MAX_FRAME, f);
	fclose(f);
	if (n < HDR_BYTES || n > MAX_FRAME - TPACKET2_HDRLEN)
		usage("the frame must hold 96 to 1900 bytes");
	return n;
}

static int open_socket(int ifindex)
{
	struct sockaddr_ll ll = {.sll_family = AF_PACKET, .sll_ifindex = ifindex};
	int one = 1;
	/* Protocol 0: this socket only sends; it never receives a copy of the namespace's frames. */
	int fd = socket(AF_PACKET, SOCK_RAW, 0);

	if (fd < 0)
		die("socket(AF_PACKET)");
	/* Straight to the driver (the veth's xmit), as a NIC's send path would be without a
	 * qdisc: the qdisc's lock and queue are not what this benchmark measures. */
	if (setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one)))
		die("PACKET_QDISC_BYPASS");
	if (bind(fd, (struct sockaddr *)&ll, sizeof(ll)))
		die("bind to the interface");
	return fd;
}

/* One sender: its socket, the frame, and the state of its mode. */
struct sender {
	int fd;
	unsigned char *frame;
	size_t len;
	/* tx_ring */
	unsigned char *ring;
	unsigned next;
	/* sendmmsg */
	struct mmsghdr msgs[BATCH];
	struct iovec iov;
	/* af_xdp */
	unsigned char *umem;
	unsigned char *tx_map, *cq_map;
	struct xdp_mmap_offsets off;
	uint32_t tx_prod, cq_cons;
	long errors;
};

static void ring_setup(struct sender *s)
{
	int v = TPACKET_V2;
	struct tpacket_req req = {.tp_block_size = RING_BLOCK, .tp_frame_size = MAX_FRAME,
				  .tp_block_nr = RING_FRAMES * MAX_FRAME / RING_BLOCK,
				  .tp_frame_nr = RING_FRAMES};

	if (setsockopt(s->fd, SOL_PACKET, PACKET_VERSION, &v, sizeof(v)))
		die("PACKET_VERSION");
	if (setsockopt(s->fd, SOL_PACKET, PACKET_TX_RING, &req, sizeof(req)))
		die("PACKET_TX_RING");
	s->ring = mmap(NULL, (size_t)RING_FRAMES * MAX_FRAME, PROT_READ | PROT_WRITE, MAP_SHARED,
		       s->fd, 0);
	if (s->ring == MAP_FAILED)
		die("mmap of the ring");
	for (unsigned i = 0; i < RING_FRAMES; i++)
		memcpy(s->ring + (size_t)i * MAX_FRAME + TPACKET2_HDRLEN - sizeof(struct sockaddr_ll),
		       s->frame, s->len);
}

static long ring_round(struct sender *s, long most)
{
	long queued = 0;

	for (unsigned k = 0; k < RING_FRAMES && queued < most; k++) {
		unsigned char *slot = s->ring + (size_t)s->next * MAX_FRAME;
		struct tpacket2_hdr *h = (struct tpacket2_hdr *)slot;

		if (h->tp_status != TP_STATUS_AVAILABLE)
			break;  /* still in flight: the kernel has not freed its skb yet */
		memcpy(slot + TPACKET2_HDRLEN - sizeof(struct sockaddr_ll), s->frame, HDR_BYTES);
		h->tp_len = (uint32_t)s->len;
		__atomic_store_n(&h->tp_status, TP_STATUS_SEND_REQUEST, __ATOMIC_RELEASE);
		s->next = (s->next + 1) % RING_FRAMES;
		queued++;
	}
	if (send(s->fd, NULL, 0, MSG_DONTWAIT) < 0 && errno != EAGAIN && errno != ENOBUFS)
		die("send on the ring");
	/* A slot the kernel could not send comes back with TP_STATUS_WRONG_FORMAT: count it. */
	return queued;
}

static void mmsg_setup(struct sender *s)
{
	s->iov.iov_base = s->frame;
	s->iov.iov_len = s->len;
	for (int i = 0; i < BATCH; i++) {
		s->msgs[i].msg_hdr.msg_iov = &s->iov;
		s->msgs[i].msg_hdr.msg_iovlen = 1;
	}
}

static long mmsg_round(struct sender *s, long most)
{
	int n = sendmmsg(s->fd, s->msgs, most < BATCH ? (unsigned)most : BATCH, 0);

	if (n < 0) {
		if (errno != ENOBUFS && errno != EAGAIN)
			die("sendmmsg");
		s->errors++;
		return 0;
	}
	return n;
}

static void xsk_setup(struct sender *s, int ifindex)
{
	struct xdp_umem_reg reg = {.len = (uint64_t)XSK_FRAMES * MAX_FRAME,
				   .chunk_size = MAX_FRAME};
	struct sockaddr_xdp sxdp = {.sxdp_family = AF_XDP, .sxdp_ifindex = (uint32_t)ifindex,
				    .sxdp_flags = XDP_COPY};
	socklen_t optlen = sizeof(s->off);
	int n = XSK_FRAMES;

	s->fd = socket(AF_XDP, SOCK_RAW, 0);
	if (s->fd < 0)
		die("socket(AF_XDP)");
	s->umem = mmap(NULL, reg.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->umem == MAP_FAILED)
		die("mmap of the UMEM");
	reg.addr = (uint64_t)(uintptr_t)s->umem;
	if (setsockopt(s->fd, SOL_XDP, XDP_UMEM_REG, &reg, sizeof(reg)))
		die("XDP_UMEM_REG");
	/* A UMEM needs both of its rings even when only sending (the fill ring stays empty). */
	if (setsockopt(s->fd, SOL_XDP, XDP_UMEM_FILL_RING, &n, sizeof(n)) ||
	    setsockopt(s->fd, SOL_XDP, XDP_UMEM_COMPLETION_RING, &n, sizeof(n)) ||
	    setsockopt(s->fd, SOL_XDP, XDP_TX_RING, &n, sizeof(n)))
		die("AF_XDP rings");
	if (getsockopt(s->fd, SOL_XDP, XDP_MMAP_OFFSETS, &s->off, &optlen))
		die("XDP_MMAP_OFFSETS");
	s->tx_map = mmap(NULL, s->off.tx.desc + XSK_FRAMES * sizeof(struct xdp_desc),
			 PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, s->fd, XDP_PGOFF_TX_RING);
	s->cq_map = mmap(NULL, s->off.cr.desc + XSK_FRAMES * sizeof(uint64_t),
			 PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, s->fd,
			 XDP_UMEM_PGOFF_COMPLETION_RING);
	if (s->tx_map == MAP_FAILED || s->cq_map == MAP_FAILED)
		die("mmap of the AF_XDP rings");
	if (bind(s->fd, (struct sockaddr *)&sxdp, sizeof(sxdp)))
		die("bind of the AF_XDP socket (copy mode)");
	for (unsigned i = 0; i < XSK_FRAMES; i++)
		memcpy(s->umem + (size_t)i * MAX_FRAME, s->frame, s->len);
}

/* Reap the completion ring: chunks the kernel is done with. */
static void xsk_complete(struct sender *s)
{
	uint32_t *prod = (uint32_t *)(s->cq_map + s->off.cr.producer);
	uint32_t *cons = (uint32_t *)(s->cq_map + s->off.cr.consumer);

	s->cq_cons = __atomic_load_n(prod, __ATOMIC_ACQUIRE);
	__atomic_store_n(cons, s->cq_cons, __ATOMIC_RELEASE);
}

static long xsk_round(struct sender *s, long most)
{
	uint32_t *prod = (uint32_t *)(s->tx_map + s->off.tx.producer);
	struct xdp_desc *desc = (struct xdp_desc *)(s->tx_map + s->off.tx.desc);
	long queued = 0;

	xsk_complete(s);
	/* tx_prod - cq_cons frames are in the kernel's hands; the rest of the UMEM is free. */
	while (queued < most && s->tx_prod - s->cq_cons < XSK_FRAMES) {
		uint32_t i = s->tx_prod % XSK_FRAMES;

		memcpy(s->umem + (size_t)i * MAX_FRAME, s->frame, HDR_BYTES);
		desc[i].addr = (uint64_t)i * MAX_FRAME;
		desc[i].len = (uint32_t)s->len;
		desc[i].options = 0;
		s->tx_prod++;
		queued++;
	}
	__atomic_store_n(prod, s->tx_prod, __ATOMIC_RELEASE);
	if (sendto(s->fd, NULL, 0, MSG_DONTWAIT, NULL, 0) < 0 && errno != EAGAIN &&
	    errno != EBUSY && errno != ENOBUFS)
		die("sendto on the AF_XDP socket");
	return queued;
}

/* Wait until the kernel has completed every frame handed to it. */
static void xsk_drain(struct sender *s)
{
	uint64_t deadline = now_ns() + 1000000000ull;

	do {
		sendto(s->fd, NULL, 0, MSG_DONTWAIT, NULL, 0);
		xsk_complete(s);
	} while (s->cq_cons != s->tx_prod && now_ns() < deadline);
	s->errors += (long)(s->tx_prod - s->cq_cons);  /* never completed: not sent */
	s->cq_cons = s->tx_prod;
}

/* Send until `until_ns` or `limit` frames (limit < 0: no limit); returns frames sent. */
static long send_for(struct sender *s, int mode, uint64_t until_ns, long limit)
{
	long sent = 0, most;
	uint64_t next_check = 0;

	while (limit < 0 || sent < limit) {
		most = limit < 0 ? RING_FRAMES : limit - sent;
		sent += mode == MODE_TX_RING ? ring_round(s, most) :
			mode == MODE_SENDMMSG ? mmsg_round(s, most) : xsk_round(s, most);
		if (sent >= (long)next_check) {
			if (now_ns() >= until_ns)
				break;
			next_check = (uint64_t)sent + 256;
		}
	}
	return sent;
}

/* Wait until every ring slot is back (sent and freed), so that "sent" means left the ring. */
static void ring_drain(struct sender *s)
{
	uint64_t deadline = now_ns() + 1000000000ull;

	send(s->fd, NULL, 0, 0);
	for (unsigned i = 0; i < RING_FRAMES; i++) {
		struct tpacket2_hdr *h = (struct tpacket2_hdr *)(s->ring + (size_t)i * MAX_FRAME);

		while (__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) == TP_STATUS_SENDING &&
		       now_ns() < deadline)
			sched_yield();
		if (h->tp_status == TP_STATUS_WRONG_FORMAT) {
			s->errors++;
			h->tp_status = TP_STATUS_AVAILABLE;
		}
	}
}

static void drain(struct sender *s, int mode)
{
	if (mode == MODE_TX_RING)
		ring_drain(s);
	else if (mode == MODE_AF_XDP)
		xsk_drain(s);
}

static void parse(int argc, char **argv, struct opts *o)
{
	o->mode = MODE_TX_RING;
	o->warmup = 20000;
	o->seconds = -1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			usage("every option takes a value");
		if (!strcmp(a, "--ifindex"))
			o->ifindex = atoi(v);
		else if (!strcmp(a, "--frame"))
			o->frame_path = v;
		else if (!strcmp(a, "--seconds"))
			o->seconds = atof(v);
		else if (!strcmp(a, "--warmup"))
			o->warmup = atol(v);
		else if (!strcmp(a, "--mode") && !strcmp(v, "tx_ring"))
			o->mode = MODE_TX_RING;
		else if (!strcmp(a, "--mode") && !strcmp(v, "sendmmsg"))
			o->mode = MODE_SENDMMSG;
		else if (!strcmp(a, "--mode") && !strcmp(v, "af_xdp"))
			o->mode = MODE_AF_XDP;
		else
			usage("unknown option or mode");
		i++;
	}
	if (o->ifindex <= 0 || !o->frame_path || o->seconds <= 0 || o->seconds > 3600 ||
	    o->warmup < 0)
		usage("--ifindex, --frame and --seconds (0 to 3600) are required");
}

int main(int argc, char **argv)
{
	static unsigned char frame[MAX_FRAME];
	struct sender s = {0};
	struct opts o = {0};
	char go[16];
	int cpu;
	uint64_t t0, t1, b0, b1;
	long sent;

	parse(argc, argv, &o);
	s.frame = frame;
	s.len = read_frame(o.frame_path, frame);
	if (o.mode == MODE_AF_XDP) {
		xsk_setup(&s, o.ifindex);
	} else {
		s.fd = open_socket(o.ifindex);
		if (o.mode == MODE_TX_RING)
			ring_setup(&s);
		else
			mmsg_setup(&s);
	}
	send_for(&s, o.mode, UINT64_MAX, o.warmup);
	drain(&s, o.mode);
	printf("ready\n");
	fflush(stdout);
	/* One measured phase per line on stdin, until it closes: the caller alternates several
	 * warm senders (one per path) in short slices. */
	while (fgets(go, sizeof(go), stdin)) {
		s.errors = 0;
		cpu = sched_getcpu();
		b0 = cpu_busy_ns(cpu);
		t0 = now_ns();
		sent = send_for(&s, o.mode, t0 + (uint64_t)(o.seconds * 1e9), -1);
		drain(&s, o.mode);
		t1 = now_ns();
		b1 = cpu_busy_ns(cpu);
		printf("{\"sent\": %ld, \"errors\": %ld, \"ns\": %llu, \"cpu\": %d, "
		       "\"busy_ns\": %llu, \"mode\": \"%s\"}\n", sent - s.errors, s.errors,
		       (unsigned long long)(t1 - t0), cpu, (unsigned long long)(b1 - b0),
		       MODE_NAMES[o.mode]);
		fflush(stdout);
	}
	return 0;
}
