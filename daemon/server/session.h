/* Sessions live in server.h with the other daemon structures; this header is their entry point. */
#ifndef SESSION_H
#define SESSION_H

#include "server.h"

#endif
