//go:build !unix

package tracking

import "os"

// Without flock the importer cannot tell whether a writer is active: it
// imports but never deletes (the seq marks keep re-imports harmless).
func tryLock(*os.File) bool { return false }

func unlock(*os.File) {}

func inode(os.FileInfo) uint64 { return 0 }

// processAlive cannot check processes here: runs are reconciled by age only.
func processAlive(int) bool { return true }
