"""torch modules: attention, KV caches (plain and quantised/paged), the meta-device skeleton."""
