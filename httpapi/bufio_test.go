package httpapi_test

import (
	"bufio"
	"io"
)

func bufioWriter(w io.Writer) *bufio.Writer { return bufio.NewWriterSize(w, 1<<16) }
