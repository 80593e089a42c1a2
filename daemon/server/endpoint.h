/* Platform: the control endpoint's preparation and peer admission (endpoint-*.c). */
#ifndef ENDPOINT_H
#define ENDPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

int endpoint_prepare(const char *path, char *err, size_t errsz);
/* Bind the listener with the socket created 0660 (group heaptrace when root), no chmod by path. */
int endpoint_bind(uv_pipe_t *pipe, const char *path);
void endpoint_cleanup(const char *path);
/* 0 if the peer may talk to us (*uid = its uid); else HT_EPERM with who it was in err. */
int endpoint_admit(uv_pipe_t *pipe, uint32_t *uid, char *err, size_t errsz);
/* 0 while the process can still open a descriptor, else UV_EMFILE or UV_ENFILE. */
int endpoint_fd_headroom(uv_pipe_t *pipe);

#endif
