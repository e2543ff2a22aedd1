/*
 * fmt.c — unit tests of core/fmt.c: the no-malloc formatter.
 */
#include "unit.h"

#include "fmt.h"

/* Renders with fn into a collect-only buffer and returns the text. */
#define RENDER(out, call)                                          \
	do {                                                       \
		struct vmap_buf b = {VMAP_BUF_COLLECT, 0, sizeof(out) - 1, (out), 0}; \
		call;                                              \
		(out)[b.len] = '\0';                               \
	} while (0)

static void expect_bytes(uint64_t v, const char *want)
{
	char out[64];
	RENDER(out, vmap_buf_bytes(&b, v));
	cr_assert_str_eq(out, want, "%lu bytes rendered as \"%s\", want \"%s\"", (unsigned long)v,
			 out, want);
}

Test(fmt, bytes_below_one_kib_are_plain)
{
	expect_bytes(0, "0 B");
	expect_bytes(1, "1 B");
	expect_bytes(512, "512 B");
	expect_bytes(1023, "1023 B");
}

Test(fmt, bytes_two_decimals_below_ten_units)
{
	expect_bytes(1024, "1.00 KiB");
	expect_bytes(1536, "1.50 KiB");
	expect_bytes(3 * 1024 + 410, "3.40 KiB");
	expect_bytes(MiB + MiB / 2, "1.50 MiB");
	expect_bytes(GiB, "1.00 GiB");
	expect_bytes(9 * GiB, "9.00 GiB");
}

Test(fmt, bytes_one_decimal_below_hundred_units)
{
	expect_bytes(10 * GiB, "10.0 GiB");
	expect_bytes(12 * MiB + MiB / 4, "12.3 MiB"); /* 12.25 rounds half up */
	expect_bytes(99 * KiB, "99.0 KiB");
}

Test(fmt, bytes_no_decimals_from_hundred_units)
{
	expect_bytes(100 * GiB, "100 GiB");
	expect_bytes(512 * MiB, "512 MiB");
	expect_bytes(1000 * KiB, "1000 KiB");
}

Test(fmt, bytes_large_units)
{
	expect_bytes(1ull << 40, "1.00 TiB");
	expect_bytes(1ull << 50, "1.00 PiB");
	expect_bytes(UINT64_MAX, "16384 PiB");
}

Test(fmt, bytes_round_to_nearest)
{
	expect_bytes(1024 + 5, "1.00 KiB");  /* 1.0049 */
	expect_bytes(1024 + 6, "1.01 KiB");  /* 1.0059 */
	expect_bytes(2047, "2.00 KiB");      /* 1.999 */
}

Test(fmt, u64_and_i64)
{
	char out[64];
	RENDER(out, vmap_buf_u64(&b, 0));
	cr_assert_str_eq(out, "0");
	RENDER(out, vmap_buf_u64(&b, 1234567890));
	cr_assert_str_eq(out, "1234567890");
	RENDER(out, vmap_buf_u64(&b, UINT64_MAX));
	cr_assert_str_eq(out, "18446744073709551615");
	RENDER(out, vmap_buf_i64(&b, -42));
	cr_assert_str_eq(out, "-42");
	RENDER(out, vmap_buf_i64(&b, INT64_MIN));
	cr_assert_str_eq(out, "-9223372036854775808");
	RENDER(out, vmap_buf_i64(&b, INT64_MAX));
	cr_assert_str_eq(out, "9223372036854775807");
}

Test(fmt, u64_padded_to_width)
{
	char out[64];
	RENDER(out, vmap_buf_u64w(&b, 42, 6));
	cr_assert_str_eq(out, "    42");
	RENDER(out, vmap_buf_u64w(&b, 123456, 3));
	cr_assert_str_eq(out, "123456");
	RENDER(out, vmap_buf_u64w(&b, 0, 1));
	cr_assert_str_eq(out, "0");
}

Test(fmt, hex)
{
	char out[64];
	RENDER(out, vmap_buf_hex(&b, 0));
	cr_assert_str_eq(out, "0x0");
	RENDER(out, vmap_buf_hex(&b, 0xdeadbeef));
	cr_assert_str_eq(out, "0xdeadbeef");
	RENDER(out, vmap_buf_hex(&b, 0x7f0000001000ull));
	cr_assert_str_eq(out, "0x7f0000001000");
	RENDER(out, vmap_buf_hex(&b, UINT64_MAX));
	cr_assert_str_eq(out, "0xffffffffffffffff");
}

Test(fmt, size_option_shortest_exact_form)
{
	static const struct {
		uint64_t v;
		const char *want;
	} cases[] = {
		{0, "0"},          {1, "1"},         {1023, "1023"},     {1024, "1K"},
		{1536, "1536"},    {65536, "64K"},   {3 * MiB, "3M"},    {GiB, "1G"},
		{64 * GiB, "64G"}, {1ull << 40, "1T"}, {1ull << 50, "1024T"}, {12345, "12345"},
		{GiB + KiB, "1048577K"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char out[64];
		RENDER(out, vmap_buf_size_opt(&b, cases[i].v));
		cr_assert_str_eq(out, cases[i].want, "%lu", (unsigned long)cases[i].v);
	}
}

Test(fmt, size_option_round_trips_through_the_parser)
{
	static const uint64_t values[] = {0, 4096, 65536, 3 * MiB, 256 * MiB, 64 * GiB, 1ull << 40,
					  12345};
	for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
		char out[64];
		RENDER(out, vmap_buf_size_opt(&b, values[i]));
		uint64_t back = 0;
		cr_assert_eq(vmap_option_parse_value(VMAP_OPT_LAZY_MAX, out, &back), 0, "%s", out);
		cr_assert_eq(back, values[i], "%s", out);
	}
}

Test(fmt, collect_only_buffer_truncates)
{
	char data[8];
	struct vmap_buf b = {VMAP_BUF_COLLECT, 0, sizeof data, data, 0};
	vmap_buf_str(&b, "hello world");
	cr_assert_eq(b.len, 8);
	cr_assert(memcmp(data, "hello wo", 8) == 0);
	vmap_buf_u64(&b, 12345);
	vmap_buf_char(&b, '!');
	vmap_buf_bytes(&b, 5 * GiB);
	cr_assert_eq(b.len, 8, "a full collect-only buffer takes nothing more");
	cr_assert(memcmp(data, "hello wo", 8) == 0);
	vmap_buf_flush(&b);
	cr_assert_eq(b.len, 8, "flush of a collect-only buffer keeps the text");
}

Test(fmt, collect_only_buffer_truncates_mid_number)
{
	char data[4];
	struct vmap_buf b = {VMAP_BUF_COLLECT, 0, sizeof data, data, 0};
	vmap_buf_char(&b, '[');
	vmap_buf_u64(&b, 987654);
	cr_assert_eq(b.len, 4);
	cr_assert(memcmp(data, "[987", 4) == 0);
}

Test(fmt, fd_buffer_flushes_when_full_and_loses_nothing)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	char data[16];
	struct vmap_buf b = {p[1], 0, sizeof data, data, 0};
	char want[1000];
	for (int i = 0; i < 999; i++)
		want[i] = (char)('a' + i % 26);
	want[999] = '\0';
	vmap_buf_str(&b, want);
	cr_assert(b.len <= b.cap);
	vmap_buf_flush(&b);
	cr_assert_eq(b.len, 0);
	close(p[1]);
	char got[2000];
	size_t n = 0;
	ssize_t r;
	while ((r = read(p[0], got + n, sizeof got - 1 - n)) > 0)
		n += (size_t)r;
	got[n] = '\0';
	close(p[0]);
	cr_assert_str_eq(got, want);
}

Test(fmt, empty_flush_writes_nothing)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	char data[16];
	struct vmap_buf b = {p[1], 0, sizeof data, data, 0};
	vmap_buf_flush(&b);
	close(p[1]);
	char got[4];
	cr_assert_eq(read(p[0], got, sizeof got), 0);
	close(p[0]);
}

Test(fmt, say_writes_one_prefixed_line_to_stderr)
{
	char err[256];
	struct capture c = capture_begin();
	vmap_say("one ", NULL, "three");
	vmap_say(NULL, NULL, NULL);
	capture_end(c, err, sizeof err);
	cr_assert_str_eq(err, "vmapalloc: one three\nvmapalloc: \n");
}

Test(fmt, say_of_a_long_text_is_complete)
{
	char big[2000];
	memset(big, 'z', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	static char err[4096];
	struct capture c = capture_begin();
	vmap_say("[", big, "]");
	size_t n = capture_end(c, err, sizeof err);
	cr_assert_eq(n, strlen("vmapalloc: [") + 1999 + 2);
	cr_assert_eq(err[n - 1], '\n');
	cr_assert_eq(err[n - 2], ']');
}

Test(fmt, write_error_is_recorded_and_later_output_dropped)
{
	char data[8];
	struct vmap_buf b = {9999, 0, sizeof data, data, 0}; /* not an open fd */
	vmap_buf_str(&b, "hello");
	cr_assert_eq(b.err, 0, "nothing written yet");
	vmap_buf_flush(&b);
	cr_assert_eq(b.err, -EBADF);
	cr_assert_eq(b.len, 0);
	vmap_buf_str(&b, "a longer text that fills the buffer more than once");
	vmap_buf_flush(&b);
	cr_assert_eq(b.err, -EBADF, "the first error is kept");
	cr_assert_eq(b.len, 0);
}
