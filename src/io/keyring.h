/* keyring.h: the waiting room's key ring file (issue 33): read, its mode checked, parsed
 * (src/core/token.h has the format). Thread: any. */
#ifndef FS_KEYRING_H
#define FS_KEYRING_H

#include "core/token.h"

#include <stddef.h>

/* Reads the key ring at path into kr. The file must be a regular file of at most 64 KiB that
 * neither group nor others may read or write (chmod 600): a secret shared with the machine's
 * other users is no secret. 0, or -EINVAL / -errno with a message in err that names the file
 * and the line, never a secret. */
int fs_keyring_load(const char *path, struct fs_keyring *kr, char *err, size_t err_len);

#endif
