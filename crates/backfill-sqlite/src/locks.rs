//! SQLite's file locks as open-file-description locks, so that a second
//! copy of SQLite in the same process cannot undo them.
//!
//! SQLite's unix VFS locks a database, its `-wal` and its `-shm` with POSIX
//! advisory locks (`fcntl(F_SETLK)`). Those belong to the *process*: two
//! copies of the library in one process (this crate's bundled one and, say,
//! the one Python's `sqlite3` module loaded) never see each other's locks,
//! and closing *any* descriptor of the file releases *every* lock the
//! process holds on it. So a user who opens and closes their own
//! connection to the file while a store is open takes the store's locks
//! away, finds the file unlocked, checkpoints it and deletes the `-wal`
//! the store is still writing to: days the store reported committed are
//! gone at the next crash (SQLite's "How To Corrupt An SQLite Database
//! File", §2.2.1).
//!
//! On Linux this module replaces the bundled library's `fcntl` (through the
//! VFS's own `xSetSystemCall`, which exists for this) by one that takes the
//! same locks as open-file-description locks (`F_OFD_SETLK`, Linux 3.15).
//! Those belong to the descriptor SQLite opened, conflict with POSIX locks
//! even within one process, and are released only when that descriptor
//! closes. Against the other copy this copy's locks are then exactly those
//! of another process: its connection waits for them or gets
//! `SQLITE_BUSY`, it cannot take the exclusive lock it needs to delete the
//! `-wal`, and closing its descriptors leaves them in place.
//!
//! SQLite's own bookkeeping assumes one lock owner per process: its
//! connections to one file share the locks it takes, whichever
//! connection's descriptor took them. So all of this copy's locks on one
//! file go through one descriptor, the first that locked it (its *owner*),
//! as a process's POSIX locks would; the owner is forgotten when SQLite
//! closes it, which it does only once it holds no lock on the file. The
//! replacement `close` is installed for that.
//!
//! A kernel without OFD locks (`EINVAL`) gets the POSIX locks back for
//! every later call. Other systems keep SQLite's own calls.

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub(crate) use imp::install;
#[cfg(all(
    test,
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub(crate) use imp::installed;

/// Keeps the connection's `-wal` and `-shm` files when it closes, as
/// `SQLITE_FCNTL_PERSIST_WAL` does (it still checkpoints them).
///
/// A store that closes last deletes them by default, and a connection of
/// the other copy of SQLite that is still open (whose locks the close took
/// away, see above) would go on writing to deleted files; kept, they stay
/// the files it writes to.
#[allow(unsafe_code)]
pub(crate) fn keep_wal(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    let mut on: std::ffi::c_int = 1;
    // SAFETY: the handle is the open connection's, alive for the call;
    // `SQLITE_FCNTL_PERSIST_WAL` takes a pointer to an `int`.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&raw mut on).cast(),
        )
    };
    if rc == rusqlite::ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rc),
            None,
        ))
    }
}

/// Nothing to install where OFD locks are not available.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub(crate) fn install() {}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[allow(unsafe_code)]
mod imp {
    use std::ffi::{c_int, c_void};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Mutex, Once};

    use rusqlite::ffi;

    /// The lock owners: for each locked file (device, inode), the
    /// descriptor all of this copy's locks on it go through.
    static OWNERS: Mutex<Vec<Owner>> = Mutex::new(Vec::new());
    /// Set once the kernel has refused an OFD lock.
    static POSIX_ONLY: AtomicBool = AtomicBool::new(false);

    #[derive(Clone, Copy)]
    struct Owner {
        dev: u64,
        ino: u64,
        fd: c_int,
    }

    /// Installs the replacement `fcntl` and `close` in the bundled SQLite,
    /// once per process, before this crate opens its first connection.
    ///
    /// A copy of the library whose VFS lacks either call, or refuses the
    /// replacement, keeps its own.
    pub(crate) fn install() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            // SAFETY: `sqlite3_vfs_find(NULL)` returns the default VFS (the
            // unix one) or null; `xSetSystemCall` is that VFS's documented
            // way to replace a system call, and the replacements have the
            // signatures of the calls they replace.
            unsafe {
                let vfs = ffi::sqlite3_vfs_find(std::ptr::null());
                if vfs.is_null() {
                    return;
                }
                let (Some(set), Some(get)) = ((*vfs).xSetSystemCall, (*vfs).xGetSystemCall) else {
                    return;
                };
                let fcntl_name = c"fcntl".as_ptr();
                let close_name = c"close".as_ptr();
                if get(vfs, fcntl_name).is_none() || get(vfs, close_name).is_none() {
                    return;
                }
                let fcntl: unsafe extern "C" fn() = std::mem::transmute(
                    ofd_fcntl as unsafe extern "C" fn(c_int, c_int, *mut c_void) -> c_int,
                );
                let close: unsafe extern "C" fn() =
                    std::mem::transmute(owned_close as unsafe extern "C" fn(c_int) -> c_int);
                if set(vfs, close_name, Some(close)) == ffi::SQLITE_OK
                    && set(vfs, fcntl_name, Some(fcntl)) != ffi::SQLITE_OK
                {
                    // Both or neither.
                    set(vfs, close_name, None);
                }
            }
        });
    }

    /// Whether the replacement is in place (for the tests).
    #[cfg(test)]
    pub(crate) fn installed() -> bool {
        // SAFETY: as in `install`.
        unsafe {
            let vfs = ffi::sqlite3_vfs_find(std::ptr::null());
            let Some(get) = (!vfs.is_null()).then(|| (*vfs).xGetSystemCall).flatten() else {
                return false;
            };
            let current = get(vfs, c"fcntl".as_ptr());
            current.map(|f| f as *const () as usize) == Some(ofd_fcntl as *const () as usize)
        }
    }

    fn owners() -> std::sync::MutexGuard<'static, Vec<Owner>> {
        // The list stays consistent whatever panicked while it was held:
        // every change is one push or one retain.
        OWNERS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn file_id(fd: c_int) -> Option<(u64, u64)> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `fstat` writes a `stat` into the buffer when it returns 0.
        if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
            return None;
        }
        // SAFETY: initialised by the successful call above.
        let st = unsafe { st.assume_init() };
        #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
        Some((st.st_dev as u64, st.st_ino as u64))
    }

    /// SQLite's `fcntl`, taking its record locks as OFD locks through the
    /// file's owner descriptor; every other command as it was.
    ///
    /// SQLite calls it as `int fcntl(int, int, ...)`; on the ABIs this is
    /// built for, the third argument arrives in the same register either
    /// way, and SQLite passes at most three.
    unsafe extern "C" fn ofd_fcntl(fd: c_int, cmd: c_int, arg: *mut c_void) -> c_int {
        let ofd = match cmd {
            libc::F_SETLK => libc::F_OFD_SETLK,
            libc::F_SETLKW => libc::F_OFD_SETLKW,
            libc::F_GETLK => libc::F_OFD_GETLK,
            // SAFETY: the caller's own call, passed on unchanged.
            _ => return unsafe { libc::fcntl(fd, cmd, arg) },
        };
        if arg.is_null() || POSIX_ONLY.load(Ordering::Relaxed) {
            // SAFETY: as above.
            return unsafe { libc::fcntl(fd, cmd, arg) };
        }
        let lock = arg.cast::<libc::flock>();
        let Some((dev, ino)) = file_id(fd) else {
            // SAFETY: as above.
            return unsafe { libc::fcntl(fd, cmd, arg) };
        };
        // SAFETY: SQLite passes a `struct flock` for these commands.
        let unlock = unsafe { (*lock).l_type } == libc::F_UNLCK as libc::c_short;
        let target = {
            let mut owners = owners();
            match owners.iter().find(|o| o.dev == dev && o.ino == ino) {
                Some(owner) => owner.fd,
                None if cmd != libc::F_GETLK && !unlock => {
                    owners.push(Owner { dev, ino, fd });
                    fd
                }
                None => fd,
            }
        };
        // SAFETY: OFD commands require `l_pid` 0; the struct is SQLite's.
        unsafe { (*lock).l_pid = 0 };
        // SAFETY: a valid descriptor of the same file and SQLite's struct.
        let rc = unsafe { libc::fcntl(target, ofd, lock) };
        if rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            // A kernel before 3.15: POSIX locks from now on, as SQLite's own.
            POSIX_ONLY.store(true, Ordering::Relaxed);
            // SAFETY: as above.
            return unsafe { libc::fcntl(fd, cmd, arg) };
        }
        rc
    }

    /// SQLite's `close`: forgets a lock owner before closing it. SQLite
    /// closes a descriptor only once its copy holds no lock on the file
    /// (it defers the close until then), so no lock is lost with it.
    unsafe extern "C" fn owned_close(fd: c_int) -> c_int {
        {
            let mut owners = owners();
            if owners.iter().any(|o| o.fd == fd) {
                owners.retain(|o| o.fd != fd);
            }
        }
        // SAFETY: SQLite's own call, passed on.
        unsafe { libc::close(fd) }
    }
}

#[cfg(all(
    test,
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[allow(unsafe_code)]
mod tests {
    use std::fs::File;
    use std::os::fd::AsRawFd;

    use crate::SqliteStore;

    /// SQLite's dead-man-switch byte in a `-shm` file, which every
    /// connection to the database holds a read lock on.
    const SHM_DMS: i64 = 128;

    /// The lock another process (or an OFD lock of this one) would find in
    /// the way of a write lock on one byte, by `F_OFD_GETLK` from a fresh
    /// descriptor.
    fn lock_in_the_way(path: &std::path::Path, at: i64) -> libc::c_short {
        let file = File::options().read(true).write(true).open(path).unwrap();
        // SAFETY: a zeroed `flock` is a valid value; the call fills it.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = libc::F_WRLCK as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        lock.l_start = at;
        lock.l_len = 1;
        // SAFETY: a valid descriptor and a `flock` for it to fill.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut lock) };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        lock.l_type
    }

    #[tokio::test]
    async fn closing_another_descriptor_of_the_file_leaves_the_stores_locks() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("pipeline.db");
        let store = SqliteStore::open(&db).await.unwrap();
        assert!(super::installed());
        let shm = dir.path().join("pipeline.db-shm");
        assert_eq!(
            lock_in_the_way(&shm, SHM_DMS),
            libc::F_RDLCK as libc::c_short,
            "the open store holds its read lock on the -shm"
        );
        // What another copy of SQLite in this process does when its own
        // connection closes: close a descriptor of each file. POSIX locks
        // would all be gone now.
        for path in [&db, &shm] {
            drop(File::open(path).unwrap());
        }
        assert_eq!(
            lock_in_the_way(&shm, SHM_DMS),
            libc::F_RDLCK as libc::c_short,
            "a close elsewhere in the process took the store's lock away"
        );
        drop(store);
    }
}
