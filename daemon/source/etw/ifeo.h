/*
 * Image File Execution Options TracingFlags, for tracing by image name (as
 * PerfView's heap tracing of a program not yet started does): `start --exe
 * app.exe` sets TracingFlags bit 0
 * (HeapTracingEnabled) under
 *   HKLM\SOFTWARE\Microsoft\Windows NT\CurrentVersion\Image File Execution Options\app.exe
 * so processes of that image started afterwards log heap events, and
 * restores what was there at session stop, at service stop, and at the next
 * service start after a crash. Every change is journaled under the service's
 * own key before it is made (PerfView keeps the same bookkeeping under
 * HKLM\SOFTWARE\Microsoft\TraceEvent\HeapTracing):
 * a crash at any point leaves a journal entry that says how to undo it.
 * Windows only (ifeo-win.c).
 */
#ifndef IFEO_H
#define IFEO_H

#include <stddef.h>
#include <stdint.h>

/* The service's journal, under HKLM (tests give their own key). */
#define IFEO_JOURNAL_KEY "SOFTWARE\\heaptrace\\IfeoJournal"

/* Is exe a file name we may set options for: "name.exe", no directory, no
 * control characters, at most 255 characters? 0, or HT_EBADARG with why. */
int ifeo_check_name(const char *exe, char *err, size_t errsz);

/* Journal, then set TracingFlags |= 1 for exe (UTF-8). The journal entry
 * records the value before (or that there was none, and whether the image's
 * key existed). Enabling an image already journaled changes nothing. 0, or
 * an error with why in err. */
int ifeo_enable(const char *journal, const char *exe, char *err, size_t errsz);
/* Undo exe's change from its journal entry (restore the old value, or
 * delete TracingFlags and the image's key when we created it and nothing
 * else was put there since), then remove the entry. 0 when done or nothing
 * was journaled; an error with why otherwise (the entry stays). */
int ifeo_restore(const char *journal, const char *exe, char *err, size_t errsz);
/* Undo every journaled change (service start after a crash, service stop).
 * Returns how many entries were restored; *failed counts the ones left. */
unsigned ifeo_restore_all(const char *journal, unsigned *failed);
/* TracingFlags of exe now: 1 with *value, 0 when absent, <0 on error (tests,
 * status). */
int ifeo_read(const char *exe, uint32_t *value);

#endif
