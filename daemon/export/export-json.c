/* json: the query's reply itself, rows and samples as the daemon sends them. */
#include "export.h"

const struct export_format export_json = {
    .name = "json",
    .extension = ".json",
    .mime = "application/json",
    .json = 1,
    .title = "JSON",
};
