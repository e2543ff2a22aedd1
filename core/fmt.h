/*
 * fmt.h — formatting without malloc or stdio.
 *
 * A vmap_buf is a fixed buffer on the caller's stack bound to an fd; it
 * flushes itself when full.  Everything vmapalloc prints (diagnostics, the
 * option table, the report) goes through it, so printing can never re-enter
 * the allocator.  No function here allocates, takes a lock or calls libc's
 * stdio: all are safe in a signal handler.  Defined in fmt.c.
 */
#ifndef VMAP_FMT_H
#define VMAP_FMT_H

#include <stddef.h>
#include <stdint.h>

struct vmap_buf {
	int fd;        /* VMAP_BUF_COLLECT: only collect (len may not exceed cap) */
	size_t len;
	size_t cap;
	char *data;
	int err;       /* first write error (-errno), 0 if none */
};

#define VMAP_BUF_COLLECT (-1000)
#define VMAP_BUF(name, fd_, size)      \
	char name##_data[size];        \
	struct vmap_buf name = {(fd_), 0, (size), name##_data, 0}

void vmap_buf_flush(struct vmap_buf *b);
void vmap_buf_mem(struct vmap_buf *b, const char *s, size_t n);
void vmap_buf_str(struct vmap_buf *b, const char *s);
void vmap_buf_char(struct vmap_buf *b, char c);
void vmap_buf_u64(struct vmap_buf *b, uint64_t v);
void vmap_buf_i64(struct vmap_buf *b, int64_t v);
void vmap_buf_hex(struct vmap_buf *b, uint64_t v); /* 0x... */
/* "vmapalloc: WHO(): invalid pointer 0x...": how every misuse line starts. */
void vmap_buf_invalid_pointer(struct vmap_buf *b, const char *who, const void *p);
/* Bytes in units people read: "512 B", "3.4 KiB", "12.0 MiB", "1.50 GiB". */
void vmap_buf_bytes(struct vmap_buf *b, uint64_t v);
/* An integer padded on the left to width w. */
void vmap_buf_u64w(struct vmap_buf *b, uint64_t v, int w);
/* A size option value in its shortest exact K/M/G/T form ("64K", "1G", "12345"). */
void vmap_buf_size_opt(struct vmap_buf *b, uint64_t v);
/* Nanoseconds as milliseconds with three decimals: "12.810 ms". */
void vmap_buf_ms(struct vmap_buf *b, uint64_t ns);
/* part/whole as a percentage with one decimal ("12.5%"), "-" when whole is 0. */
void vmap_buf_pct(struct vmap_buf *b, uint64_t part, uint64_t whole);
/* A JSON string literal: quoted, with ", \ and control characters escaped
 * (bytes >= 0x80 pass through: names and paths are UTF-8 or opaque). */
void vmap_buf_json_str(struct vmap_buf *b, const char *s);
/* s in a table cell of width w: right-aligned when w > 0, left-aligned
 * (padded after) when w < 0; never truncated. */
void vmap_buf_cell(struct vmap_buf *b, const char *s, int w);

/*
 * printf for a vmap_buf: no allocation, no libc printf, no locks, so it is
 * safe in a signal handler and on the exit path.  The text goes through
 * vmap_buf_mem, so a full buffer flushes (or, collect-only, truncates)
 * exactly as with the functions above.
 *
 * A directive is %[-][width]conv.  A width pads the converted text with
 * spaces on the left (right-aligned, as vmap_buf_cell with w > 0 and
 * vmap_buf_u64w) or, with '-', on the right; text wider than the width is
 * never truncated.  Conversions and the argument each takes, exactly of that
 * type (the compiler cannot check them: cast when in doubt):
 *
 *   %s  const char *   the string; NULL prints "(null)"
 *   %c  int            one character
 *   %u  unsigned       decimal          %d  int       decimal
 *   %U  uint64_t       decimal          %I  int64_t   decimal
 *   %x  uint64_t       0x-prefixed hex (vmap_buf_hex)
 *   %p  const void *   0x-prefixed hex of the address
 *   %B  uint64_t       bytes in units people read (vmap_buf_bytes)
 *   %P  uint64_t part, uint64_t whole: a percentage (vmap_buf_pct)
 *   %M  uint64_t       nanoseconds as milliseconds (vmap_buf_ms)
 *   %J  const char *   a JSON string literal (vmap_buf_json_str); NULL: null
 *   %%  none           '%'
 *
 * There are no length modifiers: 64-bit integers are %U and %I.  An unknown
 * conversion, or a directive cut short by the end of fmt, is copied as it
 * is and takes no argument.
 */
void vmap_buf_printf(struct vmap_buf *b, const char *fmt, ...);

/* One diagnostic line to stderr: "vmapalloc: <a><b><c>\n" (NULL parts skipped). */
void vmap_say(const char *a, const char *b, const char *c);

#endif
