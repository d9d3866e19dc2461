/* keyring.h: the waiting room's key ring file (issue 33): read, its mode checked, parsed
 * (src/core/token.h has the format). Thread: any. */
#ifndef FS_KEYRING_H
#define FS_KEYRING_H

#include "core/token.h"

#include <stddef.h>

/* Reads the key ring at path into kr. The file must be a private file (io/secret.h: regular,
 * owned by the process's user, mode 0600 or stricter) of at most 64 KiB: a secret shared with
 * the machine's other users is no secret. 0, or -EINVAL / -errno with a message in err that names
 * the file and the line, never a secret. */
int fs_keyring_load(const char *path, struct fs_keyring *kr, char *err, size_t err_len);
/* The same for any key ring (the payment provider's secrets, payment.secret.file: issue 48),
 * its messages starting with what (the configuration key) instead of admission.keys. */
int fs_keyring_load_named(const char *what, const char *path, struct fs_keyring *kr, char *err,
			  size_t err_len);

/* The same for another file of the key ring's format, named `what` in errors (the gateway's
 * auth.jwt.keys, issue 48). */
int fs_keyring_load_named(const char *path, const char *what, struct fs_keyring *kr, char *err,
			  size_t err_len);

#endif
