/* Windows console: UTF-8 output, virtual-terminal escapes, binary standard streams. */
#include "term.h"

#include <windows.h>

#include <fcntl.h>
#include <io.h>
#include <stdio.h>
#include <stdlib.h>

static UINT term_saved_cp;
static DWORD term_saved_mode;
static int term_restore_mode;

static void term_restore(void)
{
    fflush(stdout);
    HANDLE out = GetStdHandle(STD_OUTPUT_HANDLE);
    if (term_restore_mode)
        SetConsoleMode(out, term_saved_mode);
    if (term_saved_cp)
        SetConsoleOutputCP(term_saved_cp);
}

void term_init(void)
{
    /* The ctl writes bytes: UTF-8 text with "\n" line ends, and .htevb
     * recordings on standard output; load - reads .htevb from standard input.
     * The C runtime's text mode would turn "\n" into "\r\n" and stop reading at
     * a 0x1A byte (https://learn.microsoft.com/cpp/c-runtime-library/reference/setmode). */
    _setmode(_fileno(stdout), _O_BINARY);
    _setmode(_fileno(stdin), _O_BINARY);
    HANDLE out = GetStdHandle(STD_OUTPUT_HANDLE);
    DWORD mode;
    if (out == INVALID_HANDLE_VALUE || !GetConsoleMode(out, &mode))
        return; /* a file or a pipe: the bytes go as they are */
    /* The console decodes our bytes as UTF-8 (docs/windows.md#what-wine-does-and-does-not-do: the
     * ANSI code page garbles them), and VT sequences move the cursor for term_refresh
     * (https://learn.microsoft.com/windows/console/console-virtual-terminal-sequences). */
    term_saved_cp = GetConsoleOutputCP();
    SetConsoleOutputCP(CP_UTF8);
    term_saved_mode = mode;
    term_restore_mode = SetConsoleMode(out, mode | ENABLE_PROCESSED_OUTPUT |
                                                ENABLE_VIRTUAL_TERMINAL_PROCESSING) != 0;
    atexit(term_restore);
}

int term_stdout_is_tty(void)
{
    DWORD mode;
    HANDLE out = GetStdHandle(STD_OUTPUT_HANDLE);
    return out != INVALID_HANDLE_VALUE && GetConsoleMode(out, &mode) != 0;
}

int term_columns(void)
{
    /* The window's width, not the buffer's (which is often 9999 wide):
     * https://learn.microsoft.com/windows/console/getconsolescreenbufferinfo */
    CONSOLE_SCREEN_BUFFER_INFO info;
    if (!term_stdout_is_tty())
        return 0;
    if (!GetConsoleScreenBufferInfo(GetStdHandle(STD_OUTPUT_HANDLE), &info))
        return 80;
    return info.srWindow.Right - info.srWindow.Left + 1;
}

void term_refresh(void)
{
    /* Cursor home and erase the display (ECMA-48 CUP, ED 2): understood by
     * the console once ENABLE_VIRTUAL_TERMINAL_PROCESSING is on. */
    fputs("\033[H\033[2J", stdout);
}
