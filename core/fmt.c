/*
 * fmt.c — formatting into a fixed buffer, flushed to an fd with raw write(2):
 * the number, size, time and JSON renderings, and vmap_buf_printf over them.
 *
 * Owns no state.  Never allocates, never calls stdio or the printf family,
 * takes no lock: safe on the exit path and in a signal handler.  Every byte
 * goes through vmap_buf_mem, the one place that flushes a full buffer (or
 * truncates a collect-only one).
 *
 * Called by: everything that prints -- the diagnostics (alloc.c, mmap.c,
 * large.c, slab.c, lock.c, backend.c, preload/dlfcn.c), the option table
 * (options.c), the report (stats*.c) and the profile (profile.c).
 */
#include "fmt.h"

#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

#include "os.h"

void vmap_buf_flush(struct vmap_buf *b)
{
	if (b->fd == VMAP_BUF_COLLECT)
		return;
	if (b->len > 0 && !b->err) {
		int rc = vmap_os_write_all(b->fd, b->data, b->len);
		if (rc < 0)
			b->err = rc;
	}
	b->len = 0;
}

void vmap_buf_mem(struct vmap_buf *b, const char *s, size_t n)
{
	while (n > 0) {
		if (b->len == b->cap) {
			if (b->fd == VMAP_BUF_COLLECT)
				return; /* collect-only buffer: truncate */
			vmap_buf_flush(b);
		}
		size_t room = b->cap - b->len, k = n < room ? n : room;
		for (size_t i = 0; i < k; i++)
			b->data[b->len + i] = s[i];
		b->len += k;
		s += k;
		n -= k;
	}
}

void vmap_buf_str(struct vmap_buf *b, const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	vmap_buf_mem(b, s, n);
}

void vmap_buf_char(struct vmap_buf *b, char c)
{
	vmap_buf_mem(b, &c, 1);
}

void vmap_buf_u64(struct vmap_buf *b, uint64_t v)
{
	char tmp[24];
	int i = 24;
	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	vmap_buf_mem(b, tmp + i, (size_t)(24 - i));
}

void vmap_buf_u64w(struct vmap_buf *b, uint64_t v, int w)
{
	int digits = 1;
	for (uint64_t t = v; t >= 10; t /= 10)
		digits++;
	for (; digits < w; digits++)
		vmap_buf_char(b, ' ');
	vmap_buf_u64(b, v);
}

void vmap_buf_i64(struct vmap_buf *b, int64_t v)
{
	if (v < 0) {
		vmap_buf_char(b, '-');
		vmap_buf_u64(b, (uint64_t)0 - (uint64_t)v);
	} else {
		vmap_buf_u64(b, (uint64_t)v);
	}
}

void vmap_buf_hex(struct vmap_buf *b, uint64_t v)
{
	char tmp[18];
	int i = 18;
	do {
		tmp[--i] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	tmp[--i] = 'x';
	tmp[--i] = '0';
	vmap_buf_mem(b, tmp + i, (size_t)(18 - i));
}

void vmap_buf_invalid_pointer(struct vmap_buf *b, const char *who, const void *p)
{
	vmap_buf_str(b, "vmapalloc: ");
	vmap_buf_str(b, who);
	vmap_buf_str(b, "(): invalid pointer ");
	vmap_buf_hex(b, (uintptr_t)p);
}

void vmap_buf_bytes(struct vmap_buf *b, uint64_t v)
{
	static const char unit[][4] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	if (v < 1024) {
		vmap_buf_u64(b, v);
		vmap_buf_str(b, " B");
		return;
	}
	int u = 0;
	uint64_t scale = 1;
	while (u < 5 && v >= scale * 1024) {
		scale *= 1024;
		u++;
	}
	/* Two decimals below 10 units, one below 100, none above. */
	uint64_t dec = v < scale * 10 ? 100 : v < scale * 100 ? 10 : 1;
	uint64_t fixed = (uint64_t)(((unsigned __int128)v * dec + scale / 2) / scale);
	vmap_buf_u64(b, fixed / dec);
	if (dec > 1) {
		uint64_t frac = fixed % dec;
		vmap_buf_char(b, '.');
		if (dec == 100)
			vmap_buf_char(b, (char)('0' + frac / 10));
		vmap_buf_char(b, (char)('0' + frac % 10));
	}
	vmap_buf_char(b, ' ');
	vmap_buf_str(b, unit[u]);
}

void vmap_buf_size_opt(struct vmap_buf *b, uint64_t v)
{
	static const char suffix[] = "KMGT";
	int s = -1;
	while (v && s < 3 && (v & 1023) == 0) {
		v >>= 10;
		s++;
	}
	vmap_buf_u64(b, v);
	if (s >= 0)
		vmap_buf_char(b, suffix[s]);
}

void vmap_say(const char *a, const char *b, const char *c)
{
	VMAP_BUF(out, 2, 512);
	vmap_buf_str(&out, "vmapalloc: ");
	if (a)
		vmap_buf_str(&out, a);
	if (b)
		vmap_buf_str(&out, b);
	if (c)
		vmap_buf_str(&out, c);
	vmap_buf_char(&out, '\n');
	vmap_buf_flush(&out);
}

void vmap_buf_ms(struct vmap_buf *b, uint64_t ns)
{
	uint64_t us = ns / 1000;
	vmap_buf_u64(b, us / 1000);
	vmap_buf_char(b, '.');
	uint64_t f = us % 1000;
	vmap_buf_char(b, (char)('0' + f / 100));
	vmap_buf_char(b, (char)('0' + f / 10 % 10));
	vmap_buf_char(b, (char)('0' + f % 10));
	vmap_buf_str(b, " ms");
}

void vmap_buf_pct(struct vmap_buf *b, uint64_t part, uint64_t whole)
{
	if (!whole) {
		vmap_buf_char(b, '-');
		return;
	}
	uint64_t t = (uint64_t)(((unsigned __int128)part * 1000 + whole / 2) / whole);
	vmap_buf_u64(b, t / 10);
	vmap_buf_char(b, '.');
	vmap_buf_u64(b, t % 10);
	vmap_buf_char(b, '%');
}

void vmap_buf_json_str(struct vmap_buf *b, const char *s)
{
	vmap_buf_char(b, '"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			vmap_buf_char(b, '\\');
			vmap_buf_char(b, (char)c);
		} else if (c < 0x20) {
			vmap_buf_str(b, "\\u00");
			vmap_buf_char(b, "0123456789abcdef"[c >> 4]);
			vmap_buf_char(b, "0123456789abcdef"[c & 15]);
		} else {
			vmap_buf_char(b, (char)c);
		}
	}
	vmap_buf_char(b, '"');
}

void vmap_buf_cell(struct vmap_buf *b, const char *s, int w)
{
	int n = 0;
	while (s[n])
		n++;
	int width = w < 0 ? -w : w;
	if (w > 0)
		for (int i = n; i < width; i++)
			vmap_buf_char(b, ' ');
	vmap_buf_mem(b, s, (size_t)n);
	if (w < 0)
		for (int i = n; i < width; i++)
			vmap_buf_char(b, ' ');
}

/* Bytes vmap_buf_json_str writes for s. */
static size_t json_str_len(const char *s)
{
	size_t n = 2;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		n += c == '"' || c == '\\' ? 2 : c < 0x20 ? 6 : 1;
	}
	return n;
}

static void pad(struct vmap_buf *b, size_t n, int width)
{
	for (; n < (size_t)width; n++)
		vmap_buf_char(b, ' ');
}

/* One conversion other than %s, %J and %%, without its width; false (and
 * nothing taken or written) for a conversion vmap_buf_printf does not know. */
static bool convert(struct vmap_buf *b, char conv, va_list *ap)
{
	switch (conv) {
	case 'c':
		vmap_buf_char(b, (char)va_arg(*ap, int));
		break;
	case 'u':
		vmap_buf_u64(b, va_arg(*ap, unsigned));
		break;
	case 'd':
		vmap_buf_i64(b, va_arg(*ap, int));
		break;
	case 'U':
		vmap_buf_u64(b, va_arg(*ap, uint64_t));
		break;
	case 'I':
		vmap_buf_i64(b, va_arg(*ap, int64_t));
		break;
	case 'x':
		vmap_buf_hex(b, va_arg(*ap, uint64_t));
		break;
	case 'p':
		vmap_buf_hex(b, (uintptr_t)va_arg(*ap, const void *));
		break;
	case 'B':
		vmap_buf_bytes(b, va_arg(*ap, uint64_t));
		break;
	case 'P': {
		uint64_t part = va_arg(*ap, uint64_t);
		vmap_buf_pct(b, part, va_arg(*ap, uint64_t));
		break;
	}
	case 'M':
		vmap_buf_ms(b, va_arg(*ap, uint64_t));
		break;
	default:
		return false;
	}
	return true;
}

/* Strings are written straight through (their length is known before);
 * every other conversion is at most 24 characters ("-9223372036854775808",
 * "16384 PiB"), so a padded one is rendered into a small collect-only
 * buffer first. */
void vmap_buf_printf(struct vmap_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	for (const char *p = fmt; *p; p++) {
		const char *run = p;
		while (*p && *p != '%')
			p++;
		vmap_buf_mem(b, run, (size_t)(p - run));
		if (!*p)
			break;
		const char *start = p++;
		bool left = *p == '-';
		if (left)
			p++;
		int width = 0;
		for (; *p >= '0' && *p <= '9'; p++)
			if (width < 10000)
				width = width * 10 + (*p - '0');
		char conv = *p;
		if (conv == '\0') {
			vmap_buf_mem(b, start, (size_t)(p - start)); /* cut short: as it is */
			break;
		}
		if (conv == '%') {
			vmap_buf_char(b, '%');
		} else if (conv == 's' || conv == 'J') {
			const char *s = va_arg(ap, const char *);
			size_t n = !s ? (conv == 's' ? 6 : 4) : conv == 's' ? strlen(s) : json_str_len(s);
			if (!left)
				pad(b, n, width);
			if (!s)
				vmap_buf_str(b, conv == 's' ? "(null)" : "null");
			else if (conv == 's')
				vmap_buf_mem(b, s, n);
			else
				vmap_buf_json_str(b, s);
			if (left)
				pad(b, n, width);
		} else if (!width) {
			if (!convert(b, conv, &ap))
				vmap_buf_mem(b, start, (size_t)(p - start + 1)); /* unknown: as it is */
		} else {
			char tmp[32];
			struct vmap_buf t = {VMAP_BUF_COLLECT, 0, sizeof tmp, tmp, 0};
			if (!convert(&t, conv, &ap)) {
				vmap_buf_mem(b, start, (size_t)(p - start + 1));
				continue;
			}
			if (!left)
				pad(b, t.len, width);
			vmap_buf_mem(b, tmp, t.len);
			if (left)
				pad(b, t.len, width);
		}
	}
	va_end(ap);
}
