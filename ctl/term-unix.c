/* Unix terminal: isatty and ANSI escapes; UTF-8 needs nothing. */
#include "term.h"

#include <stdio.h>
#include <unistd.h>

void term_init(void) {}

int term_stdout_is_tty(void)
{
    return isatty(STDOUT_FILENO);
}

void term_refresh(void)
{
    /* ECMA-48 CUP (home) and ED 2 (erase the whole display). */
    fputs("\033[H\033[2J", stdout);
}
