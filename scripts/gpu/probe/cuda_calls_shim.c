// LD_PRELOAD shim: logs what a process does with sockets and with files it opens for
// writing, so that we can see what CUDA's initialisation needs from the sandbox (issue 24).
// Optional faults, from the environment:
//   SHIM_CONNECT_ERRNO=N   connect() on an AF_UNIX socket fails with errno N
//   SHIM_SOCKET_UNIX_ERRNO=N  socket(AF_UNIX, ...) fails with errno N
//   SHIM_PROC_WRITE_ERRNO=N   opening a /proc path for writing fails with errno N
// Log: SHIM_LOG (a file path; appended, one line per call).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void logf_(const char *fmt, ...) {
    const char *p = getenv("SHIM_LOG");
    if (!p) return;
    int fd = ((int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open"))(p, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 2) n = sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(fd, buf, n);
    (void)w;
    close(fd);
}

static int env_errno(const char *k) {
    const char *v = getenv(k);
    return v ? atoi(v) : 0;
}

static void addr_str(const struct sockaddr *a, socklen_t len, char *out, size_t cap) {
    if (!a) { snprintf(out, cap, "(null)"); return; }
    if (a->sa_family == AF_UNIX) {
        const struct sockaddr_un *u = (const struct sockaddr_un *)a;
        if (len > sizeof(sa_family_t) && u->sun_path[0] == 0)
            snprintf(out, cap, "unix:@%.*s", (int)(len - sizeof(sa_family_t) - 1), u->sun_path + 1);
        else
            snprintf(out, cap, "unix:%s", u->sun_path);
    } else {
        snprintf(out, cap, "family=%d", a->sa_family);
    }
}

int socket(int domain, int type, int protocol) {
    static int (*real)(int, int, int);
    if (!real) real = dlsym(RTLD_NEXT, "socket");
    int e = env_errno("SHIM_SOCKET_UNIX_ERRNO");
    if (domain == AF_UNIX && e) { logf_("socket(%d,%d,%d) -> faked errno %d", domain, type, protocol, e); errno = e; return -1; }
    int r = real(domain, type, protocol);
    int se = errno;
    logf_("socket(domain=%d,type=%#x,proto=%d) = %d (errno %d) pid=%d", domain, type, protocol, r, r < 0 ? se : 0, getpid());
    errno = se;
    return r;
}

int socketpair(int domain, int type, int protocol, int sv[2]) {
    static int (*real)(int, int, int, int *);
    if (!real) real = dlsym(RTLD_NEXT, "socketpair");
    int r = real(domain, type, protocol, sv);
    int se = errno;
    logf_("socketpair(domain=%d,type=%#x) = %d", domain, type, r);
    errno = se;
    return r;
}

int connect(int fd, const struct sockaddr *a, socklen_t len) {
    static int (*real)(int, const struct sockaddr *, socklen_t);
    if (!real) real = dlsym(RTLD_NEXT, "connect");
    char s[256];
    addr_str(a, len, s, sizeof s);
    int e = env_errno("SHIM_CONNECT_ERRNO");
    if (e && a && a->sa_family == AF_UNIX) { logf_("connect(%d, %s) -> faked errno %d", fd, s, e); errno = e; return -1; }
    int r = real(fd, a, len);
    int se = errno;
    logf_("connect(%d, %s) = %d (errno %d)", fd, s, r, r < 0 ? se : 0);
    errno = se;
    return r;
}

int bind(int fd, const struct sockaddr *a, socklen_t len) {
    static int (*real)(int, const struct sockaddr *, socklen_t);
    if (!real) real = dlsym(RTLD_NEXT, "bind");
    char s[256];
    addr_str(a, len, s, sizeof s);
    int r = real(fd, a, len);
    int se = errno;
    logf_("bind(%d, %s) = %d (errno %d)", fd, s, r, r < 0 ? se : 0);
    errno = se;
    return r;
}

ssize_t sendmsg(int fd, const struct msghdr *m, int flags) {
    static ssize_t (*real)(int, const struct msghdr *, int);
    if (!real) real = dlsym(RTLD_NEXT, "sendmsg");
    char s[256] = "-";
    if (m && m->msg_name) addr_str(m->msg_name, m->msg_namelen, s, sizeof s);
    ssize_t r = real(fd, m, flags);
    int se = errno;
    logf_("sendmsg(%d, to=%s, ctrl=%zu) = %zd (errno %d)", fd, s, m ? (size_t)m->msg_controllen : 0, r, r < 0 ? se : 0);
    errno = se;
    return r;
}

ssize_t sendto(int fd, const void *b, size_t n, int flags, const struct sockaddr *a, socklen_t len) {
    static ssize_t (*real)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
    if (!real) real = dlsym(RTLD_NEXT, "sendto");
    char s[256] = "-";
    if (a) addr_str(a, len, s, sizeof s);
    ssize_t r = real(fd, b, n, flags, a, len);
    int se = errno;
    logf_("sendto(%d, %zu bytes, to=%s) = %zd (errno %d)", fd, n, s, r, r < 0 ? se : 0);
    errno = se;
    return r;
}

static int writing(int flags) { return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)); }

static int open_common(const char *name, int dirfd, const char *path, int flags, mode_t mode,
                       int (*real_open)(const char *, int, ...), int (*real_openat)(int, const char *, int, ...)) {
    int e = env_errno("SHIM_PROC_WRITE_ERRNO");
    if (path && writing(flags) && strncmp(path, "/proc", 5) == 0 && e) {
        logf_("%s(%s, %#x) -> faked errno %d", name, path, flags, e);
        errno = e;
        return -1;
    }
    int r = real_open ? real_open(path, flags, mode) : real_openat(dirfd, path, flags, mode);
    int se = errno;
    if (path && (writing(flags) || strncmp(path, "/proc", 5) == 0 || strncmp(path, "/run", 4) == 0 ||
                 strncmp(path, "/var/run", 8) == 0 || strncmp(path, "/dev", 4) == 0))
        logf_("%s(%s, %#x) = %d (errno %d)", name, path, flags, r, r < 0 ? se : 0);
    errno = se;
    return r;
}

#define OPEN_WRAPPER(fname)                                                            \
    int fname(const char *path, int flags, ...) {                                      \
        static int (*real)(const char *, int, ...);                                    \
        if (!real) real = dlsym(RTLD_NEXT, #fname);                                   \
        mode_t mode = 0;                                                               \
        if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); mode = va_arg(ap, int); va_end(ap); } \
        return open_common(#fname, 0, path, flags, mode, real, NULL);                  \
    }
#define OPENAT_WRAPPER(fname)                                                          \
    int fname(int dirfd, const char *path, int flags, ...) {                           \
        static int (*real)(int, const char *, int, ...);                               \
        if (!real) real = dlsym(RTLD_NEXT, #fname);                                   \
        mode_t mode = 0;                                                               \
        if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); mode = va_arg(ap, int); va_end(ap); } \
        return open_common(#fname, dirfd, path, flags, mode, NULL, real);              \
    }
OPEN_WRAPPER(open)
OPEN_WRAPPER(open64)
OPENAT_WRAPPER(openat)
OPENAT_WRAPPER(openat64)

FILE *fopen(const char *path, const char *mode) {
    static FILE *(*real)(const char *, const char *);
    if (!real) real = dlsym(RTLD_NEXT, "fopen");
    int w = mode && (strchr(mode, 'w') || strchr(mode, 'a') || strchr(mode, '+'));
    int e = env_errno("SHIM_PROC_WRITE_ERRNO");
    if (w && path && strncmp(path, "/proc", 5) == 0 && e) { logf_("fopen(%s, %s) -> faked errno %d", path, mode, e); errno = e; return NULL; }
    FILE *r = real(path, mode);
    int se = errno;
    if (path && (w || strncmp(path, "/proc", 5) == 0)) logf_("fopen(%s, %s) = %p (errno %d)", path, mode, (void *)r, r ? 0 : se);
    errno = se;
    return r;
}
