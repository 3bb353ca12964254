"""sources: the content-addressed cache (cache), fetch + verify (fetch), export of work
trees (export), moving the cache between hosts (bundle)."""
