/*
 * The query engine as it was before engine views (main at 97e496e, copied
 * verbatim into query-ref/query-before-view.c), its exported names prefixed
 * ref_ so test-query-view links it beside the current query.c and checks
 * that the same events give the same answers both ways.
 */
#define ht_by_names ref_by_names
#define ht_sort_names ref_sort_names
#define ht_type_names ref_type_names
#define query_init ref_query_init
#define query_row_size ref_query_row_size
#define query_row_count ref_query_row_count
#define query_row_outstanding ref_query_row_outstanding
#define query_row_outstanding_count ref_query_row_outstanding_count
#define query_row_impacting ref_query_row_impacting
#define skip_cache_free ref_skip_cache_free
#define skip_cache_warm ref_skip_cache_warm
#define engine_query ref_engine_query
#define query_result_free ref_query_result_free
#define query_result_image ref_query_result_image

#include "query-ref/query-before-view.c"
