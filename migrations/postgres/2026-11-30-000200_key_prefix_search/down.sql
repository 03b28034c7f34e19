DROP INDEX api_keys_prefix_page_idx;
