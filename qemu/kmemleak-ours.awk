# Counts kmemleak's reports (kmemleak.txt) of objects allocated on a path through edu_accel and
# prints the count, then the first such report's header line. The guest scans after the module
# is unloaded, so its frames show as bare module-space addresses (0xffffffffa0000000 and up;
# edu_accel is the only module the guest keeps loaded), or as edu_* symbols while it is loaded.
# The frame's own pointer may be printed hashed: "[<(____ptrval____)>] 0xffffffffa001a243".
/^unreferenced object/ { obj = $0; hit = 0 }
/edu_|\[<[^>]*>\] 0xffffffff[a-f][0-9a-f]+$/ {
	if (!hit) { n++; hit = 1; if (!first) first = obj }
}
END { print n + 0; if (first) print first }
