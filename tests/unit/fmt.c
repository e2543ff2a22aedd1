/*
 * fmt.c — unit tests of core/fmt.c, the no-malloc formatter, and of the
 * report's renderings through it (stats_text.c, stats_json.c) for chosen
 * figures.
 */
#include "unit.h"

#include "backend.h"
#include "fmt.h"
#include "stats.h"
#include "stats_report.h"
#include "vmapalloc.h"

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

/* ---- vmap_buf_printf ---------------------------------------------------- */

#define PRINTF(out, ...) RENDER(out, vmap_buf_printf(&b, __VA_ARGS__))

Test(fmt, printf_copies_plain_text)
{
	char out[64];
	PRINTF(out, "no directives here");
	cr_assert_str_eq(out, "no directives here");
	PRINTF(out, "");
	cr_assert_str_eq(out, "");
}

Test(fmt, printf_percent_percent_is_one_percent)
{
	char out[64];
	PRINTF(out, "100%% of %%s");
	cr_assert_str_eq(out, "100% of %s");
	PRINTF(out, "%5%");
	cr_assert_str_eq(out, "%", "a width on %% pads nothing");
}

Test(fmt, printf_string_and_null_string)
{
	char out[64];
	PRINTF(out, "[%s] [%s]", "abc", "");
	cr_assert_str_eq(out, "[abc] []");
	PRINTF(out, "%s", (const char *)NULL);
	cr_assert_str_eq(out, "(null)");
}

Test(fmt, printf_char)
{
	char out[64];
	PRINTF(out, "%c%c%c", 'a', '-', 'z');
	cr_assert_str_eq(out, "a-z");
}

Test(fmt, printf_unsigned_and_int)
{
	char out[64];
	PRINTF(out, "%u %u %d %d %d", 0u, 4294967295u, 0, -2147483647 - 1, 2147483647);
	cr_assert_str_eq(out, "0 4294967295 0 -2147483648 2147483647");
}

Test(fmt, printf_u64_and_i64_take_64_bit_arguments)
{
	char out[128];
	PRINTF(out, "%U %U %I %I %I", (uint64_t)0, UINT64_MAX, (int64_t)-42, INT64_MIN, INT64_MAX);
	cr_assert_str_eq(out, "0 18446744073709551615 -42 -9223372036854775808 9223372036854775807");
}

Test(fmt, printf_hex_is_0x_prefixed_like_vmap_buf_hex)
{
	char out[64];
	PRINTF(out, "%x %x %x", (uint64_t)0, (uint64_t)0xdeadbeef, UINT64_MAX);
	cr_assert_str_eq(out, "0x0 0xdeadbeef 0xffffffffffffffff");
}

Test(fmt, printf_pointer_is_0x_prefixed_hex)
{
	char out[64];
	PRINTF(out, "%p %p", (const void *)0x7f0000001000ull, (const void *)NULL);
	cr_assert_str_eq(out, "0x7f0000001000 0x0");
}

Test(fmt, printf_bytes_uses_binary_units)
{
	char out[64];
	PRINTF(out, "%B|%B|%B|%B|%B", (uint64_t)512, (uint64_t)1536, (uint64_t)(12 * MiB + MiB / 4),
	       (uint64_t)(100 * GiB), UINT64_MAX);
	cr_assert_str_eq(out, "512 B|1.50 KiB|12.3 MiB|100 GiB|16384 PiB");
}

Test(fmt, printf_percent_takes_part_then_whole)
{
	char out[64];
	PRINTF(out, "%P %P %P %P", (uint64_t)1, (uint64_t)8, (uint64_t)0, (uint64_t)5, (uint64_t)3,
	       (uint64_t)0, (uint64_t)2, (uint64_t)1);
	cr_assert_str_eq(out, "12.5% 0.0% - 200.0%", "a whole of 0 prints -");
}

Test(fmt, printf_ms_prints_nanoseconds_as_milliseconds)
{
	char out[64];
	PRINTF(out, "%M, %M, %M", (uint64_t)12810000, (uint64_t)999, (uint64_t)2000000000);
	cr_assert_str_eq(out, "12.810 ms, 0.000 ms, 2000.000 ms");
}

Test(fmt, printf_json_string_is_quoted_and_escaped)
{
	char out[128];
	PRINTF(out, "{%J: %J}", "k\"ey\\", "line\nend\x01\xc3\xa9");
	cr_assert_str_eq(out, "{\"k\\\"ey\\\\\": \"line\\u000aend\\u0001\xc3\xa9\"}");
	PRINTF(out, "%J", (const char *)NULL);
	cr_assert_str_eq(out, "null", "NULL is JSON's null");
}

Test(fmt, printf_arguments_are_taken_in_order_across_conversions)
{
	char out[128];
	PRINTF(out, "%s=%U (%B, %P) %c %d %J", "n", (uint64_t)2048, (uint64_t)2048, (uint64_t)1,
	       (uint64_t)4, '!', -7, "j");
	cr_assert_str_eq(out, "n=2048 (2.00 KiB, 25.0%) ! -7 \"j\"");
}

Test(fmt, printf_width_right_aligns)
{
	char out[128];
	PRINTF(out, "[%12B][%6U][%4d][%8P][%5s][%3c][%8x][%10M]", (uint64_t)1536, (uint64_t)42, -5,
	       (uint64_t)1, (uint64_t)3, "ab", 'c', (uint64_t)255, (uint64_t)1500000);
	cr_assert_str_eq(out, "[    1.50 KiB][    42][  -5][   33.3%][   ab][  c][    0xff][  1.500 ms]");
}

Test(fmt, printf_minus_width_left_aligns)
{
	char out[128];
	PRINTF(out, "[%-20s][%-6U][%-10B][%-4I][%-8J]", "shard", (uint64_t)7, (uint64_t)0,
	       (int64_t)-1, "x");
	cr_assert_str_eq(out, "[shard               ][7     ][0 B       ][-1  ][\"x\"     ]");
}

Test(fmt, printf_width_never_truncates)
{
	char out[128];
	PRINTF(out, "[%3s][%2U][%4B][%-1J][%2P]", "longer", (uint64_t)123456, (uint64_t)5 * GiB,
	       "abc", (uint64_t)1, (uint64_t)3);
	cr_assert_str_eq(out, "[longer][123456][5.00 GiB][\"abc\"][33.3%]");
}

Test(fmt, printf_width_of_json_counts_the_escapes)
{
	char out[64];
	PRINTF(out, "[%8J]", "a\"");
	cr_assert_str_eq(out, "[   \"a\\\"\"]", "\"a\\\"\" is 5 characters: 3 spaces");
	PRINTF(out, "[%12J]", "\t");
	cr_assert_str_eq(out, "[    \"\\u0009\"]");
}

Test(fmt, printf_width_of_null_strings)
{
	char out[64];
	PRINTF(out, "[%8s][%-6J]", (const char *)NULL, (const char *)NULL);
	cr_assert_str_eq(out, "[  (null)][null  ]");
}

Test(fmt, printf_width_matches_cell_and_u64w)
{
	static const uint64_t values[] = {0, 9, 10, 1023, 1024, 123456789, UINT64_MAX};
	for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
		char want[64], got[64], s[32];
		RENDER(want, vmap_buf_u64w(&b, values[i], 11));
		PRINTF(got, "%11U", values[i]);
		cr_assert_str_eq(got, want);
		RENDER(s, vmap_buf_bytes(&b, values[i]));
		RENDER(want, vmap_buf_cell(&b, s, 11));
		PRINTF(got, "%11B", values[i]);
		cr_assert_str_eq(got, want);
		RENDER(want, vmap_buf_cell(&b, s, -11));
		PRINTF(got, "%-11B", values[i]);
		cr_assert_str_eq(got, want);
	}
}

Test(fmt, printf_unknown_conversion_is_copied_and_takes_no_argument)
{
	char out[64];
	PRINTF(out, "%q %-5y %s", "taken by %s");
	cr_assert_str_eq(out, "%q %-5y taken by %s");
}

Test(fmt, printf_directive_cut_short_by_the_end_is_copied)
{
	char out[64];
	PRINTF(out, "50%");
	cr_assert_str_eq(out, "50%");
	PRINTF(out, "50%-3");
	cr_assert_str_eq(out, "50%-3");
}

Test(fmt, printf_into_a_small_collect_buffer_truncates)
{
	char data[10];
	struct vmap_buf b = {VMAP_BUF_COLLECT, 0, sizeof data, data, 0};
	vmap_buf_printf(&b, "%s|%12B|%U", "abc", (uint64_t)1536, (uint64_t)99);
	cr_assert_eq(b.len, 10);
	cr_assert(memcmp(data, "abc|    1.", 10) == 0, "padding and text are cut alike");
	vmap_buf_printf(&b, "%U", (uint64_t)1);
	cr_assert_eq(b.len, 10, "a full collect-only buffer takes nothing more");
}

Test(fmt, printf_truncates_like_the_functions_it_uses)
{
	char a[7], c[7];
	struct vmap_buf ba = {VMAP_BUF_COLLECT, 0, sizeof a, a, 0};
	struct vmap_buf bc = {VMAP_BUF_COLLECT, 0, sizeof c, c, 0};
	vmap_buf_printf(&ba, "[%B]%J", (uint64_t)3 * MiB, "x");
	vmap_buf_char(&bc, '[');
	vmap_buf_bytes(&bc, 3 * MiB);
	vmap_buf_char(&bc, ']');
	vmap_buf_json_str(&bc, "x");
	cr_assert_eq(ba.len, bc.len);
	cr_assert(memcmp(a, c, ba.len) == 0);
}

Test(fmt, printf_into_a_small_fd_buffer_flushes_and_loses_nothing)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	char data[8];
	struct vmap_buf b = {p[1], 0, sizeof data, data, 0};
	for (int i = 0; i < 20; i++)
		vmap_buf_printf(&b, "%-6s%12B|%5U%%%J\n", "row", (uint64_t)1536 * (uint64_t)i,
				(uint64_t)i, "q\"");
	cr_assert(b.len <= b.cap);
	vmap_buf_flush(&b);
	close(p[1]);
	char want[2048];
	size_t w = 0;
	for (int i = 0; i < 20; i++) {
		char line[128];
		struct vmap_buf l = {VMAP_BUF_COLLECT, 0, sizeof line, line, 0};
		vmap_buf_cell(&l, "row", -6);
		char s[32];
		RENDER(s, vmap_buf_bytes(&b, 1536 * (uint64_t)i));
		vmap_buf_cell(&l, s, 12);
		vmap_buf_char(&l, '|');
		vmap_buf_u64w(&l, (uint64_t)i, 5);
		vmap_buf_char(&l, '%');
		vmap_buf_json_str(&l, "q\"");
		vmap_buf_char(&l, '\n');
		memcpy(want + w, line, l.len);
		w += l.len;
	}
	want[w] = '\0';
	char got[4096];
	size_t n = 0;
	ssize_t r;
	while ((r = read(p[0], got + n, sizeof got - 1 - n)) > 0)
		n += (size_t)r;
	got[n] = '\0';
	close(p[0]);
	cr_assert_str_eq(got, want);
}

/* ---- the report's renderings: vmap_buf_printf through stats' tables ------ */

/* Figures chosen for the whole report; each statistic's value comes from its
 * name, so that a statistic added to stats.def changes no other value.  The
 * arena is not set up here: no shard tables. */
static void report_figures(struct vmap_figures *f, bool in_signal)
{
	memset(f, 0, sizeof *f);
	for (unsigned i = 0; i <= VMAP_STAT_COUNT; i++) {
		uint32_t h = 2166136261u; /* FNV-1a */
		for (const char *p = vmap_stat_name(i); *p; p++)
			h = (h ^ (uint8_t)*p) * 16777619u;
		f->v[i] = h % 100000000u;
	}
	uint64_t *v = f->v;
	vmap_lazy_max = 64 * MiB;
	f->when = VMAP_WHEN_EXIT;
	strcpy(f->comm, "prog\"x");
	v[FIG_pid] = 4242;
	v[FIG_elapsed_ns] = 12810000;
	v[FIG_rss] = 5 * MiB;
	v[FIG_hwm] = 6 * MiB;
	v[FIG_maps] = 120;
	v[FIG_own_maps] = 9;
	v[FIG_lock_waits] = 2254;
	v[FIG_lock_sleeps] = 31;
	if (in_signal) {
		f->when = VMAP_WHEN_SIGNAL;
		strcpy(f->comm, "sig");
		v[FIG_threads] = 1;
		v[FIG_slabs_made] = 0;
		vmap_lazy_limit = vmap_lazy_max;
		vmap_opt.purge_delay_ms = 0;
		vmap_opt.purge_advice = VMAP_ADVICE_DONTNEED;
		vmap_opt.backend = VMAP_BACKEND_AUTO;
	} else {
		f->is = IS_SMALL | IS_ROLLUP;
		v[FIG_parent_pid] = 41;
		v[FIG_threads] = 3;
		v[FIG_anon_huge] = 2 * MiB;
		v[FIG_lazy_free] = 4096;
		v[FIG_max_maps] = 65530;
		v[FIG_small_in_use] = 300000;
		v[FIG_small_heap] = 400000;
		v[FIG_slab_in_use] = 20 * MiB;
		v[FIG_switch_ns] = 3500000;
		vmap_lazy_limit = 128 * MiB;
		vmap_opt.purge_delay_ms = 2000;
		vmap_opt.purge_advice = VMAP_ADVICE_FREE;
		vmap_opt.backend = VMAP_BACKEND_MIMALLOC;
		v[FIG_mimalloc_bytes] = 32 * MiB;
		v[FIG_mimalloc_peak] = 40 * MiB;
		v[FIG_mimalloc_range_bytes] = 64 * MiB;
	}
	vmap_report_derive(f);
}

static char report_out[16384];

static const char *render_report(bool json, bool in_signal)
{
	struct vmap_figures f;
	report_figures(&f, in_signal);
	struct vmap_buf b = {VMAP_BUF_COLLECT, 0, sizeof report_out - 1, report_out, 0};
	if (json)
		vmap_report_json(&b, &f);
	else
		vmap_report_text(&b, &f);
	cr_assert(b.len < b.cap, "the report fits the test's buffer");
	report_out[b.len] = '\0';
	return report_out;
}

Test(report, text_of_chosen_figures_is_exact)
{
	cr_assert_str_eq(
		render_report(false, false),
		"vmapalloc " VMAPALLOC_VERSION_STRING " report at exit: pid 4242 (prog\"x), "
		"forked child of pid 41, 12.810 ms after start\n"
		"  (2 other thread(s) still running: figures may be approximate)\n"
		"  large blocks in use       46.6 MiB in 62127987 blocks (peak 88.7 MiB)\n"
		"  small blocks in use       293 KiB (glibc, of a 391 KiB heap) + builtin slabs "
		"20.0 MiB in use of 56.6 MiB in 18880860 + mimalloc 32.0 MiB committed; in all 175 MiB\n"
		"  small backend             mimalloc: 71650138 / 5804591 (32.0 MiB committed, "
		"peak 40.0 MiB; range 64.0 MiB), glibc 99031457 / 5453230 (allocations / frees)\n"
		"  resident (VmRSS)          5.00 MiB (peak 6.00 MiB); AnonHugePages 2.00 MiB, "
		"LazyFree 4.00 KiB\n"
		"  cached for reuse          79.2 MiB (no arena yet: set up on the first large block "
		"or served mmap)\n"
		"  address space reserved    19.1 MiB in 51562506 region(s), 0 shard(s) (virtual: "
		"untouched pages cost nothing); 19.4 MiB lent to the kernel for glibc "
		"(tight RLIMIT_AS)\n"
		"  mappings                  120 of vm.max_map_count 65530 (0.2%); vmapalloc's own 9\n"
		"  calls                     malloc 79453195, free 71705005, calloc 97020549, "
		"realloc 33279475, aligned 11058793\n"
		"  small / large             36367867 / 63777779 allocations (60.2 MiB large in "
		"total); frees 18751788 / 36419268\n"
		"  large reuse               pool hits 65295790 (37.6%), resident runs 25209145 "
		"(14.5%; 22668163 from another shard), fresh 83282976 (page faults; 28047748 "
		"extending a resident run, 24469941 populated); calloc zeroing skipped 65322161\n"
		"  realloc of large blocks   in place 96416149, pages moved 79370186, copied 75954578; "
		"shrunk 84237941\n"
		"  purges                    34730581: 70.8 MiB returned in 79253639 system calls "
		"(MADV_FREE), 73.931 ms\n"
		"  program's mmap            served 12433570 (75.9 MiB in use), passed to the kernel "
		"32595111; munmap 28687497 (partial 27693725), mremap 67283739, refused 35456873\n"
		"  locks                     shared 21428759, shard 11716328 (contended 19.3%); "
		"waits for any lock 2254, slept 31\n"
		"  counters                  per-CPU since the second thread, 3.500 ms after start");
}

Test(report, text_in_a_signal_handler_says_what_it_did_not_read)
{
	cr_assert_str_eq(
		render_report(false, true),
		"vmapalloc " VMAPALLOC_VERSION_STRING " report on signal: pid 4242 (sig), "
		"12.810 ms after start\n"
		"  large blocks in use       46.6 MiB in 62127987 blocks (peak 88.7 MiB)\n"
		"  small blocks in use       (glibc's figures are not read in a signal handler)\n"
		"  small backend             auto: glibc 99031457 / 5453230, slabs 51013204 / "
		"33422541 (allocations / frees); trims of glibc's heap 72326120\n"
		"  resident (VmRSS)          5.00 MiB (peak 6.00 MiB)\n"
		"  cached for reuse          79.2 MiB (no arena yet: set up on the first large block "
		"or served mmap)\n"
		"  address space reserved    19.1 MiB in 51562506 region(s), 0 shard(s) (virtual: "
		"untouched pages cost nothing); 19.4 MiB lent to the kernel for glibc "
		"(tight RLIMIT_AS)\n"
		"  mappings                  120; vmapalloc's own 9\n"
		"  calls                     malloc 79453195, free 71705005, calloc 97020549, "
		"realloc 33279475, aligned 11058793\n"
		"  small (glibc) / large     36367867 / 63777779 allocations (60.2 MiB large in "
		"total); frees 18751788 / 36419268\n"
		"  large reuse               pool hits 65295790 (37.6%), resident runs 25209145 "
		"(14.5%; 22668163 from another shard), fresh 83282976 (page faults; 28047748 "
		"extending a resident run, 24469941 populated); calloc zeroing skipped 65322161\n"
		"  realloc of large blocks   in place 96416149, pages moved 79370186, copied 75954578; "
		"shrunk 84237941\n"
		"  purges                    34730581: 70.8 MiB returned in 79253639 system calls "
		"(MADV_DONTNEED), 73.931 ms\n"
		"  program's mmap            served 12433570 (75.9 MiB in use), passed to the kernel "
		"32595111; munmap 28687497 (partial 27693725), mremap 67283739, refused 35456873\n"
		"  locks                     shared 21428759, shard 11716328 (contended 19.3%); "
		"waits for any lock 2254, slept 31\n"
		"  counters                  atomic (no second thread has allocated yet)");
}

/* The JSON is head, then every statistic of stats.def in its order with its
 * figure, then tail. */
static void expect_json(bool in_signal, const char *head, const char *tail)
{
	const char *json = render_report(true, in_signal);
	struct vmap_figures f;
	report_figures(&f, in_signal);
	size_t hl = strlen(head), tl = strlen(tail), n = strlen(json);
	cr_assert(n > hl + tl);
	cr_assert(strncmp(json, head, hl) == 0, "JSON starts\n%.*s\nwant\n%s", (int)hl, json, head);
	const char *p = json + hl;
	for (unsigned i = 0; i <= VMAP_STAT_COUNT; i++) {
		char want[96];
		RENDER(want, vmap_buf_printf(&b, "%s\"%s\": %U", i ? ", " : "", vmap_stat_name(i),
					     f.v[i]));
		cr_assert(strncmp(p, want, strlen(want)) == 0, "counter %u: want %s", i, want);
		p += strlen(want);
	}
	cr_assert_str_eq(p, tail);
}

Test(report, json_of_chosen_figures_is_exact)
{
	expect_json(false,
		    "{\"vmapalloc_report_version\": 1, \"version\": \"" VMAPALLOC_VERSION_STRING "\", "
		    "\"when\": \"exit\", \"pid\": 4242, \"parent_pid\": 41, \"program\": \"prog\\\"x\", "
		    "\"elapsed_ns\": 12810000, \"threads\": 3, \"approximate\": true, "
		    "\"large_bytes_in_use\": 48854994, \"large_blocks_in_use\": 62127987, "
		    "\"large_bytes_peak\": 93021826, \"small_bytes_in_use\": 300000, "
		    "\"small_heap_bytes\": 400000, \"slab_bytes_in_use\": 20971520, "
		    "\"bytes_in_use\": 149709030, "
		    "\"resident_bytes\": 5242880, \"resident_peak_bytes\": 6291456, "
		    "\"anon_huge_pages_bytes\": 2097152, \"lazy_free_bytes\": 4096, "
		    "\"mapped_bytes\": 20016034, \"cached_bytes\": 83020839, "
		    "\"lazy_max_bytes\": 67108864, \"lazy_limit_bytes\": 134217728, "
		    "\"purge_delay_ms\": 2000, \"purge_advice\": \"free\", \"mappings\": 120, \"mappings_own\": 9, "
		    "\"max_map_count\": 65530, \"shards\": 0, \"lock_waits\": 2254, \"lock_sleeps\": 31, \"counter_mode\": \"percpu\", "
		    "\"counter_switch_ns\": 3500000, \"counters\": {",
		    "}, \"shard_table\": [], \"thread_cache_bytes\": 83020839, \"size_table\": [], "
		    "\"backend\": \"mimalloc\", \"small_backends\": {\"glibc\": {\"allocs\": 99031457, "
		    "\"frees\": 5453230, \"bytes_in_use\": 300000}, \"slabs\": {\"allocs\": 51013204, "
		    "\"frees\": 33422541, \"bytes\": 59381249}, \"mimalloc\": {\"allocs\": 71650138, "
		    "\"frees\": 5804591, \"committed_bytes\": 33554432, "
		    "\"committed_peak_bytes\": 41943040}}");
}

Test(report, json_in_a_signal_handler_has_nulls_for_what_it_did_not_read)
{
	expect_json(true,
		    "{\"vmapalloc_report_version\": 1, \"version\": \"" VMAPALLOC_VERSION_STRING "\", "
		    "\"when\": \"signal\", \"pid\": 4242, \"parent_pid\": 0, \"program\": \"sig\", "
		    "\"elapsed_ns\": 12810000, \"threads\": 1, \"approximate\": true, "
		    "\"large_bytes_in_use\": 48854994, \"large_blocks_in_use\": 62127987, "
		    "\"large_bytes_peak\": 93021826, \"small_bytes_in_use\": null, "
		    "\"small_heap_bytes\": null, \"slab_bytes_in_use\": 0, \"bytes_in_use\": null, "
		    "\"resident_bytes\": 5242880, \"resident_peak_bytes\": 6291456, "
		    "\"anon_huge_pages_bytes\": null, \"lazy_free_bytes\": null, "
		    "\"mapped_bytes\": 20016034, \"cached_bytes\": 83020839, "
		    "\"lazy_max_bytes\": 67108864, \"lazy_limit_bytes\": 67108864, "
		    "\"purge_delay_ms\": 0, \"purge_advice\": \"dontneed\", \"mappings\": 120, \"mappings_own\": 9, "
		    "\"max_map_count\": null, \"shards\": 0, \"lock_waits\": 2254, \"lock_sleeps\": 31, \"counter_mode\": \"atomic\", "
		    "\"counter_switch_ns\": null, \"counters\": {",
		    "}, \"shard_table\": [], \"thread_cache_bytes\": 83020839, \"size_table\": [], "
		    "\"backend\": \"auto\", \"small_backends\": {\"glibc\": {\"allocs\": 99031457, "
		    "\"frees\": 5453230, \"bytes_in_use\": null}, \"slabs\": {\"allocs\": 51013204, "
		    "\"frees\": 33422541, \"bytes\": 59381249}, \"mimalloc\": {\"allocs\": 71650138, "
		    "\"frees\": 5804591, \"committed_bytes\": 0, \"committed_peak_bytes\": 0}}");
}
