/* Unix terminal: isatty and ANSI escapes; UTF-8 needs nothing. */
#include "term.h"

#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

void term_init(void) {}

int term_stdout_is_tty(void)
{
    return isatty(STDOUT_FILENO);
}

int term_columns(void)
{
    /* TIOCGWINSZ: the size the terminal told the kernel (tty_ioctl(4)); a
     * terminal that never said has 0 columns: taken as 80. */
    struct winsize ws;
    if (!isatty(STDOUT_FILENO))
        return 0;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0)
        return 80;
    return ws.ws_col;
}

void term_refresh(void)
{
    /* ECMA-48 CUP (home) and ED 2 (erase the whole display). */
    fputs("\033[H\033[2J", stdout);
}
