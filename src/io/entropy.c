/* entropy.c: the operating system's randomness (see entropy.h). */
#include "io/entropy.h"

#include "core/map.h"

#include <stdint.h>
#include <sys/random.h>

int fs_hash_key_random(void)
{
	uint64_t k[2];
	if (getrandom(k, sizeof k, 0) != (ssize_t)sizeof k)
		return -1;
	fs_hash_key(k[0], k[1]);
	return 0;
}
