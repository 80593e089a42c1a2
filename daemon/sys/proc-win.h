/* What the Windows process services share (procmem-win.c, procmods-win.c). Windows only. */
#ifndef PROC_WIN_H
#define PROC_WIN_H

#include <windows.h>

/* Nonzero when the process of h no longer runs: it exited, though h keeps
 * its object (GetExitCodeProcess, and a wait for an exit code of 259). */
int proc_win_gone(HANDLE h);

#endif
