/* Platform: the ctl's terminal (term-unix.c; term-win.c on Windows). */
#ifndef TERM_H
#define TERM_H

/* Prepare standard output once, before anything is printed. Unix: nothing
 * (the terminal decodes the UTF-8 the ctl writes). Windows: a console gets
 * the UTF-8 code page (SetConsoleOutputCP(CP_UTF8)) and virtual-terminal
 * processing (ENABLE_VIRTUAL_TERMINAL_PROCESSING) for term_refresh, both
 * restored at exit. */
void term_init(void);
/* 1 if standard output is a terminal: live views then refresh in place. */
int term_stdout_is_tty(void);
/* The terminal's width in columns when standard output is one, else 0
 * (a pipe or a file: nothing is cut to fit). */
int term_columns(void);
/* Begin the next screen of a live view in place: cursor home, screen
 * cleared. Only when term_stdout_is_tty(). */
void term_refresh(void);

#endif
