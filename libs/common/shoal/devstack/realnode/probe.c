/* shoal-probe: the real node's test workload, a static binary in a scratch image (no shell, no libc NSS).

     probe serve PORT          print "serving", answer every TCP connection with "hello from <hostname>\n"
     probe dial HOST:PORT...   for each target: resolve HOST (an IPv4 literal, or an A query to the first
                               nameserver of /etc/resolv.conf), connect, print the first line answered;
                               exit 1 if any target failed
     probe env NAME...         print NAME=value (or "NAME unset") for each, then idle until stopped
   Both print whether the ServiceAccount token is mounted. Output goes to stdout (the container's log). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static const char *TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token";

static void timeouts(int fd, int seconds) {
  struct timeval tv = {seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static int nameserver(struct in_addr *out) {
  FILE *f = fopen("/etc/resolv.conf", "r");
  char line[256], addr[64];
  if (!f) return -1;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "nameserver %63s", addr) == 1 && inet_pton(AF_INET, addr, out) == 1) {
      fclose(f);
      return 0;
    }
  }
  fclose(f);
  return -1;
}

/* One DNS A query over UDP; the first A record of the answer. */
static int resolve(const char *name, struct in_addr *out) {
  unsigned char q[512], r[512];
  struct in_addr ns;
  struct sockaddr_in to = {0};
  size_t n = 12;
  if (inet_pton(AF_INET, name, out) == 1) return 0;
  if (nameserver(&ns) != 0) return -1;
  memset(q, 0, 12);
  q[0] = 0x53; q[1] = 0x48; q[2] = 0x01; q[5] = 1; /* id, recursion desired, one question */
  for (const char *p = name; *p;) {
    const char *dot = strchr(p, '.');
    size_t len = dot ? (size_t)(dot - p) : strlen(p);
    if (len == 0 || len > 63 || n + len + 6 > sizeof q) return -1;
    q[n++] = (unsigned char)len;
    memcpy(q + n, p, len);
    n += len;
    p += len + (dot ? 1 : 0);
  }
  q[n++] = 0; q[n++] = 0; q[n++] = 1; q[n++] = 0; q[n++] = 1; /* root, type A, class IN */
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return -1;
  timeouts(fd, 3);
  to.sin_family = AF_INET;
  to.sin_port = htons(53);
  to.sin_addr = ns;
  ssize_t got = -1;
  if (sendto(fd, q, n, 0, (struct sockaddr *)&to, sizeof to) == (ssize_t)n) got = recv(fd, r, sizeof r, 0);
  close(fd);
  if (got < 12 || (r[3] & 0x0f) != 0) return -1;
  int answers = (r[6] << 8) | r[7];
  size_t i = n; /* the answer follows the echoed question */
  while (answers-- > 0 && i + 12 <= (size_t)got) {
    if ((r[i] & 0xc0) == 0xc0) i += 2;
    else { while (i < (size_t)got && r[i]) i += r[i] + 1; i++; }
    int type = (r[i] << 8) | r[i + 1];
    int rdlen = (r[i + 8] << 8) | r[i + 9];
    i += 10;
    if (type == 1 && rdlen == 4 && i + 4 <= (size_t)got) {
      memcpy(out, r + i, 4);
      return 0;
    }
    i += (size_t)rdlen;
  }
  return -1;
}

static int dial(const char *target) {
  char host[256];
  const char *colon = strrchr(target, ':');
  struct sockaddr_in to = {0};
  char line[256] = "";
  if (!colon || (size_t)(colon - target) >= sizeof host) {
    printf("dial %s: want HOST:PORT\n", target);
    return 1;
  }
  memcpy(host, target, (size_t)(colon - target));
  host[colon - target] = 0;
  to.sin_family = AF_INET;
  to.sin_port = htons((unsigned short)atoi(colon + 1));
  if (resolve(host, &to.sin_addr) != 0) {
    printf("dial %s: cannot resolve %s\n", target, host);
    return 1;
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeouts(fd, 3);
  if (fd < 0 || connect(fd, (struct sockaddr *)&to, sizeof to) != 0) {
    printf("dial %s (%s): connect failed: %s\n", target, inet_ntoa(to.sin_addr), strerror(errno));
    if (fd >= 0) close(fd);
    return 1;
  }
  timeouts(fd, 1); /* a TLS server says nothing first: do not wait long for a line */
  ssize_t got = recv(fd, line, sizeof line - 1, 0);
  close(fd);
  line[got > 0 ? got : 0] = 0;
  line[strcspn(line, "\r\n")] = 0;
  printf("dial %s (%s): connected: %s\n", target, inet_ntoa(to.sin_addr), got > 0 ? line : "(no answer)");
  return 0;
}

static int serve(int port) {
  struct sockaddr_in at = {0};
  char name[128] = "?", msg[200];
  int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
  gethostname(name, sizeof name - 1);
  snprintf(msg, sizeof msg, "hello from %s\n", name);
  at.sin_family = AF_INET;
  at.sin_port = htons((unsigned short)port);
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&at, sizeof at) != 0 || listen(fd, 16) != 0) {
    printf("serve %d: %s\n", port, strerror(errno));
    return 1;
  }
  printf("serving on %d\n", port);
  fflush(stdout);
  for (;;) {
    int c = accept(fd, NULL, NULL);
    if (c < 0) continue;
    ssize_t ignored = write(c, msg, strlen(msg));
    (void)ignored;
    close(c);
  }
}

static void stop(int sig) { (void)sig; _exit(0); }

int main(int argc, char **argv) {
  int failed = 0;
  signal(SIGTERM, stop);
  signal(SIGINT, stop);
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("token %s\n", access(TOKEN, R_OK) == 0 ? "mounted" : "missing");
  if (argc == 3 && strcmp(argv[1], "serve") == 0) return serve(atoi(argv[2]));
  if (argc >= 3 && strcmp(argv[1], "dial") == 0) {
    for (int i = 2; i < argc; i++) failed |= dial(argv[i]);
    return failed;
  }
  if (argc >= 3 && strcmp(argv[1], "env") == 0) {
    for (int i = 2; i < argc; i++) {
      const char *value = getenv(argv[i]);
      if (value) printf("%s=%s\n", argv[i], value);
      else printf("%s unset\n", argv[i]);
    }
    for (;;) pause();
  }
  printf("usage: probe serve PORT | probe dial HOST:PORT... | probe env NAME...\n");
  return 2;
}
