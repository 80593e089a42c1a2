/* Windows only, under wine's real registry: IFEO TracingFlags with its
 * journal (ifeo.h), including a daemon killed between the journal write and
 * the change, and between the change and its undo. Each case uses its own
 * image name and journal key, so cases may run in parallel. */
#include "ifeo.h"
#include "ht-test.h"

#include <windows.h>
#include <stdio.h>

static char exe[64], journal[128];

static void names(const char *tag)
{
    snprintf(exe, sizeof(exe), "ht-ifeo-%lu-%s.exe", (unsigned long)GetCurrentProcessId(), tag);
    snprintf(journal, sizeof(journal), "SOFTWARE\\heaptrace\\IfeoJournal-test-%lu-%s",
             (unsigned long)GetCurrentProcessId(), tag);
}

static HKEY image_key(int create)
{
    wchar_t path[400];
    _snwprintf(path, 400,
               L"SOFTWARE\\Microsoft\\Windows NT\\CurrentVersion\\Image File Execution Options\\%hs",
               exe);
    HKEY k = NULL;
    LONG rc = create ? RegCreateKeyExW(HKEY_LOCAL_MACHINE, path, 0, NULL, 0, KEY_ALL_ACCESS |
                                       KEY_WOW64_64KEY, NULL, &k, NULL)
                     : RegOpenKeyExW(HKEY_LOCAL_MACHINE, path, 0, KEY_ALL_ACCESS | KEY_WOW64_64KEY,
                                     &k);
    return rc == ERROR_SUCCESS ? k : NULL;
}

static int journal_entries(void)
{
    wchar_t w[200];
    MultiByteToWideChar(CP_UTF8, 0, journal, -1, w, 200);
    HKEY j;
    if (RegOpenKeyExW(HKEY_LOCAL_MACHINE, w, 0, KEY_QUERY_VALUE | KEY_WOW64_64KEY, &j) != 0)
        return 0;
    DWORD n = 0;
    RegQueryInfoKeyW(j, NULL, NULL, NULL, NULL, NULL, NULL, &n, NULL, NULL, NULL, NULL);
    RegCloseKey(j);
    return (int)n;
}

static void cleanup_keys(void)
{
    wchar_t w[200];
    MultiByteToWideChar(CP_UTF8, 0, journal, -1, w, 200);
    RegDeleteKeyExW(HKEY_LOCAL_MACHINE, w, KEY_WOW64_64KEY, 0);
    HKEY k = image_key(0);
    if (k) {
        RegCloseKey(k);
        wchar_t path[400];
        _snwprintf(path, 400,
                   L"SOFTWARE\\Microsoft\\Windows NT\\CurrentVersion\\Image File Execution Options\\%hs",
                   exe);
        RegDeleteKeyExW(HKEY_LOCAL_MACHINE, path, KEY_WOW64_64KEY, 0);
    }
}

/* No options before: after the session, none again (not even the key). */
static void test_absent_restored(void)
{
    char err[256];
    uint32_t v = 0;
    names("absent");
    CHECK_EQ(ifeo_read(exe, &v), 0);
    CHECK(ifeo_enable(journal, exe, err, sizeof(err)) == 0);
    CHECK_EQ(ifeo_read(exe, &v), 1);
    CHECK_EQ(v, 1);
    CHECK_EQ(journal_entries(), 1);
    /* Enabling again keeps the first journal entry (what was there before us). */
    CHECK(ifeo_enable(journal, exe, err, sizeof(err)) == 0);
    CHECK_EQ(journal_entries(), 1);
    CHECK(ifeo_restore(journal, exe, err, sizeof(err)) == 0);
    CHECK_EQ(ifeo_read(exe, &v), 0);
    CHECK(image_key(0) == NULL);
    CHECK_EQ(journal_entries(), 0);
    CHECK(ifeo_restore(journal, exe, err, sizeof(err)) == 0); /* nothing journaled: fine */
    cleanup_keys();
}

/* Someone's options were there (TracingFlags 4, a Debugger value): they are
 * put back exactly, and their key stays. */
static void test_previous_kept(void)
{
    char err[256];
    uint32_t v = 0;
    names("prev");
    HKEY k = image_key(1);
    CHECK(k);
    DWORD four = 4;
    RegSetValueExW(k, L"TracingFlags", 0, REG_DWORD, (const BYTE *)&four, 4);
    RegSetValueExW(k, L"Debugger", 0, REG_SZ, (const BYTE *)L"x", 4);
    RegCloseKey(k);
    CHECK(ifeo_enable(journal, exe, err, sizeof(err)) == 0);
    CHECK_EQ(ifeo_read(exe, &v), 1);
    CHECK_EQ(v, 5);
    unsigned failed = 9;
    CHECK_EQ(ifeo_restore_all(journal, &failed), 1);
    CHECK_EQ(failed, 0);
    CHECK_EQ(ifeo_read(exe, &v), 1);
    CHECK_EQ(v, 4);
    k = image_key(0);
    CHECK(k);
    DWORD n = 0;
    RegQueryInfoKeyW(k, NULL, NULL, NULL, NULL, NULL, NULL, &n, NULL, NULL, NULL, NULL);
    RegCloseKey(k);
    CHECK_EQ(n, 2);
    /* A TracingFlags of another type is not ours to touch. */
    k = image_key(1);
    RegSetValueExW(k, L"TracingFlags", 0, REG_SZ, (const BYTE *)L"1", 4);
    RegCloseKey(k);
    CHECK(ifeo_enable(journal, exe, err, sizeof(err)) != 0);
    CHECK(strstr(err, "not a DWORD") != NULL);
    CHECK_EQ(journal_entries(), 0);
    cleanup_keys();
}

/* The daemon dies (TerminateProcess, as a crash) right after the journal
 * write, or right after TracingFlags is set: the next start undoes it. */
static int crash_child(const char *step)
{
    char self[MAX_PATH], cmd[3 * MAX_PATH];
    GetModuleFileNameA(NULL, self, sizeof(self));
    snprintf(cmd, sizeof(cmd), "\"%s\" child-enable %s %s", self, exe, journal);
    SetEnvironmentVariableA("HEAPTRACE_TEST_IFEO_CRASH", step);
    STARTUPINFOA si = {.cb = sizeof(si)};
    PROCESS_INFORMATION pi;
    BOOL ok = CreateProcessA(NULL, cmd, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi);
    SetEnvironmentVariableA("HEAPTRACE_TEST_IFEO_CRASH", NULL);
    if (!ok)
        return -1;
    WaitForSingleObject(pi.hProcess, 30000);
    DWORD code = 0;
    GetExitCodeProcess(pi.hProcess, &code);
    CloseHandle(pi.hProcess);
    CloseHandle(pi.hThread);
    return (int)code;
}

static void test_crash_points(void)
{
#ifndef HEAPTRACE_TEST_KNOBS
    fprintf(stderr, "SKIP: the crash points are test knobs, not in a Release build\n");
    exit(HT_TEST_SKIP);
#endif
    uint32_t v = 0;
    names("crash");
    CHECK_EQ(crash_child("journal"), 99);
    CHECK_EQ(journal_entries(), 1);
    CHECK_EQ(ifeo_read(exe, &v), 0); /* died before the change */
    unsigned failed = 0;
    CHECK_EQ(ifeo_restore_all(journal, &failed), 1);
    CHECK_EQ(ifeo_read(exe, &v), 0);
    CHECK_EQ(journal_entries(), 0);
    CHECK_EQ(crash_child("set"), 99);
    CHECK_EQ(ifeo_read(exe, &v), 1);
    CHECK_EQ(v, 1);
    CHECK_EQ(ifeo_restore_all(journal, &failed), 1);
    CHECK_EQ(failed, 0);
    CHECK_EQ(ifeo_read(exe, &v), 0);
    CHECK(image_key(0) == NULL);
    CHECK_EQ(journal_entries(), 0);
    /* And a clean run exits 0 with the change made and journaled. */
    CHECK_EQ(crash_child("none"), 0);
    CHECK_EQ(journal_entries(), 1);
    CHECK_EQ(ifeo_restore_all(journal, &failed), 1);
    cleanup_keys();
}

static void test_bad_names(void)
{
    char err[256];
    names("bad");
    static const char *bad[] = {"app", "app.dll", "dir\\app.exe", "../app.exe", "c:app.exe",
                                "a\nb.exe", ".exe", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(ifeo_enable(journal, bad[i], err, sizeof(err)) != 0);
    CHECK_EQ(journal_entries(), 0);
    CHECK(ifeo_check_name("App.EXE", err, sizeof(err)) == 0);
    cleanup_keys();
}

int ht_test_failed;
int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "child-enable") == 0) {
        char err[256];
        if (ifeo_enable(argv[3], argv[2], err, sizeof(err)) != 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        return 0;
    }
    static const struct ht_test_case cases[] = {T(absent_restored), T(previous_kept),
                                                 T(crash_points), T(bad_names)};
    return ht_test_run(cases, sizeof(cases) / sizeof(cases[0]), argc, argv);
}
