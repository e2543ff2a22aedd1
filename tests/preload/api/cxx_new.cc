// cxx_new.cc — C++'s operator new and delete under LD_PRELOAD=libvmapalloc.so:
// the plain, array and sized forms are vmapalloc's own (not libstdc++'s
// calling malloc), and keep the language's contract: a failed new calls the
// new-handler until there is none, then throws std::bad_alloc; the nothrow
// form returns nullptr; new of 0 bytes gives distinct pointers; blocks made
// by one thread are deleted by another.
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

static int failures;
#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            std::fprintf(stderr, "FAIL: %s:%d: %s\n", __FILE__, __LINE__, #c); \
            failures++;                                                       \
        }                                                                     \
    } while (0)

static int handler_calls;
static void handler()
{
    if (++handler_calls == 3)
        std::set_new_handler(nullptr); // the next failure throws
}

static bool ours(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    Dl_info info;
    return f && dladdr(f, &info) && info.dli_fname && std::strstr(info.dli_fname, "libvmapalloc");
}

int main()
{
    if (!dlsym(RTLD_DEFAULT, "vmapalloc_version")) {
        std::fprintf(stderr, "FAIL: not running under vmapalloc\n");
        return 1;
    }
    for (const char *n : {"_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm"})
        if (!ours(n)) {
            std::fprintf(stderr, "FAIL: %s is not vmapalloc's\n", n);
            failures++;
        }

    // Every size of the small classes and a few large ones, sized deletes.
    std::vector<std::pair<char *, size_t>> v;
    for (size_t n = 0; n <= 70000; n += n < 2048 ? 1 : 509) {
        char *p = new char[n];
        CHECK(p != nullptr && (uintptr_t)p % 16 == 0);
        std::memset(p, 0x5a, n);
        v.push_back({p, n});
    }
    for (auto &e : v)
        operator delete[](e.first, e.second);
    v.clear();

    // new of 0 bytes: distinct pointers.
    void *z1 = operator new(0), *z2 = operator new(0);
    CHECK(z1 && z2 && z1 != z2);
    operator delete(z1, (size_t)0);
    operator delete(z2);

    // A failed new: the handler three times, then bad_alloc.
    const size_t huge = (size_t)1 << 62;
    std::set_new_handler(handler);
    bool threw = false;
    try {
        void *p = operator new(huge);
        operator delete(p);
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    CHECK(threw);
    CHECK(handler_calls == 3);
    threw = false;
    try {
        char *p = new char[huge];
        delete[] p;
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    CHECK(threw);
    CHECK(handler_calls == 3); // no handler any more
    // nothrow: nullptr, through the throwing form.
    CHECK(operator new(huge, std::nothrow) == nullptr);
    CHECK(new (std::nothrow) char[huge] == nullptr);

    // Blocks handed from thread to thread, each deleting its predecessor's.
    std::vector<char *> blocks(2000, nullptr);
    for (int round = 0; round < 8; round++) {
        std::thread t([&blocks, round] {
            for (size_t i = 0; i < blocks.size(); i++) {
                delete[] blocks[i];
                size_t n = 8 + (i * 7919 + (size_t)round * 104729) % 1000;
                blocks[i] = new char[n];
                blocks[i][0] = (char)n;
            }
        });
        t.join();
    }
    for (char *p : blocks)
        delete[] p;

    if (failures)
        return 1;
    std::puts("cxx_new: ok");
    return 0;
}
