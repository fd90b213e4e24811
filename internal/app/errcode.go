package app

import "github.com/sluicehq/sluice/internal/errs"

func errorCode(err error) string { return errs.Code(err) }
