// A WAN link's propagation delay between two network namespaces, for bench/sites.sh and tests/sites_chaos.py: the
// kernel of these machines has tbf but no netem, so this process is the delay. It attaches to a TUN device in each
// namespace (made and configured beforehand with `ip tuntap`) and hands every packet read from one to the other
// DELAY_MS after it read it, both ways, in order. The bandwidth is shaped by tbf on the two TUN devices: their egress
// is what this process reads, so a packet queues at its shaper, then travels DELAY_MS. A packet that finds the queue
// full is dropped (counted on exit, as a real link would lose it). TCP over it sees the real round trip.
// Faults, as netem would give them: -l P drops each packet with probability P percent; -j J adds a delay drawn
// uniformly from [0, J] ms to each packet, kept in order (netem with a rate: a later packet never overtakes); -s
// seeds the draws. SIGUSR1 cuts the link (every packet queued or read from then on is lost), SIGUSR2 heals it.
// Usage: wan_link [-l LOSS_PERCENT] [-j JITTER_MS] [-s SEED] DELAY_MS NAMESPACE_A TUN_A NAMESPACE_B TUN_B
// (root; stops on SIGTERM or SIGINT)
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

enum { kSlots = 16384, kSlotBytes = 2048 };

struct queue {
  unsigned char (*data)[kSlotBytes];
  uint16_t len[kSlots];
  int64_t due[kSlots];
  unsigned head, tail;  // head: next to write out; tail: next free
  int64_t last_due;
  uint64_t passed, dropped, lost;
};

static volatile sig_atomic_t stop, cut;
static void on_signal(int s) { (void)s; stop = 1; }
static void on_cut(int s) { cut = s == SIGUSR1; }

static double loss;      // probability of losing a packet
static int64_t jitter;   // ns, the most a packet's delay is drawn above DELAY_MS
static uint64_t rng = 88172645463325252ull;

static double uniform(void) {  // xorshift64: reproducible from -s, no libc state
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int open_tun(const char* ns, const char* dev) {
  char path[256];
  snprintf(path, sizeof path, "/var/run/netns/%s", ns);
  int nsfd = open(path, O_RDONLY);
  if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0) {
    fprintf(stderr, "wan_link: cannot enter network namespace %s: %s\n", ns, strerror(errno));
    exit(1);
  }
  close(nsfd);
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  snprintf(ifr.ifr_name, IFNAMSIZ, "%s", dev);
  if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr) != 0) {
    fprintf(stderr, "wan_link: cannot attach to TUN device %s in %s: %s\n", dev, ns, strerror(errno));
    exit(1);
  }
  return fd;
}

// Reads what `from` has into q, each due `delay` from now.
static void take(int from, struct queue* q, int64_t delay) {
  for (;;) {
    unsigned char scratch[kSlotBytes];
    const int full = q->tail - q->head == kSlots;
    unsigned char* buf = full ? scratch : q->data[q->tail % kSlots];
    const ssize_t n = read(from, buf, kSlotBytes);
    if (n <= 0) return;
    if (full) {
      ++q->dropped;
      continue;
    }
    if (cut || (loss > 0 && uniform() < loss)) {
      ++q->lost;
      continue;
    }
    int64_t due = now_ns() + delay + (jitter > 0 ? (int64_t)(uniform() * (double)jitter) : 0);
    if (due < q->last_due) due = q->last_due;
    q->last_due = due;
    q->len[q->tail % kSlots] = (uint16_t)n;
    q->due[q->tail % kSlots] = due;
    ++q->tail;
  }
}

// Writes every due packet of q to `to`; returns the time the next one is due (or -1).
static int64_t give(int to, struct queue* q, int64_t now) {
  if (cut) {  // what was on the wire when it was cut
    q->lost += q->tail - q->head;
    q->head = q->tail;
    return -1;
  }
  while (q->head != q->tail && q->due[q->head % kSlots] <= now) {
    if (write(to, q->data[q->head % kSlots], q->len[q->head % kSlots]) < 0 && errno == EAGAIN) return now + 100000;
    ++q->head;
    ++q->passed;
  }
  return q->head == q->tail ? -1 : q->due[q->head % kSlots];
}

int main(int argc, char** argv) {
  int opt;
  while ((opt = getopt(argc, argv, "l:j:s:")) != -1) {
    if (opt == 'l') loss = atof(optarg) / 100;
    else if (opt == 'j') jitter = (int64_t)(atof(optarg) * 1e6);
    else if (opt == 's') rng = strtoull(optarg, NULL, 10) * 2654435761ull + 1;
    else break;
  }
  if (argc - optind != 5 || loss < 0 || loss > 1 || jitter < 0) {
    fprintf(stderr, "usage: wan_link [-l LOSS_PERCENT] [-j JITTER_MS] [-s SEED] DELAY_MS NAMESPACE_A TUN_A "
            "NAMESPACE_B TUN_B\n");
    return 2;
  }
  argv += optind - 1;
  const int64_t delay = (int64_t)(atof(argv[1]) * 1e6);
  int fd[2] = {open_tun(argv[2], argv[3]), open_tun(argv[4], argv[5])};
  static struct queue q[2];  // q[0]: a to b
  for (int i = 0; i < 2; ++i) q[i].data = malloc((size_t)kSlots * kSlotBytes);
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  signal(SIGUSR1, on_cut);
  signal(SIGUSR2, on_cut);
  while (!stop) {
    const int64_t now = now_ns();
    int64_t next = -1;
    for (int i = 0; i < 2; ++i) {
      const int64_t due = give(fd[1 - i], &q[i], now);
      if (due >= 0 && (next < 0 || due < next)) next = due;
    }
    struct pollfd p[2] = {{fd[0], POLLIN, 0}, {fd[1], POLLIN, 0}};
    struct timespec wait = {1, 0};
    if (next >= 0) {
      const int64_t d = next > now ? next - now : 0;
      wait.tv_sec = d / 1000000000;
      wait.tv_nsec = d % 1000000000;
    }
    if (ppoll(p, 2, &wait, NULL) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i)
      if (p[i].revents & POLLIN) take(fd[i], &q[i], delay);
  }
  fprintf(stderr, "wan_link %s/%s <-> %s/%s: %llu and %llu packets passed, %llu and %llu dropped, %llu and %llu lost\n",
          argv[2], argv[3], argv[4], argv[5], (unsigned long long)q[0].passed, (unsigned long long)q[1].passed,
          (unsigned long long)q[0].dropped, (unsigned long long)q[1].dropped, (unsigned long long)q[0].lost,
          (unsigned long long)q[1].lost);
  return 0;
}
