/* entropy.h: the operating system's randomness, for what must not be guessable from outside:
 * the key of the maps' hash (core/map.h), set once at a program's start. */
#ifndef FS_ENTROPY_H
#define FS_ENTROPY_H

/* Gives the maps' hash a random key (getrandom(2)). 0, or -1 when the system had no
 * randomness to give (the fixed key stays: crafted keys can then collide). */
int fs_hash_key_random(void);

#endif
