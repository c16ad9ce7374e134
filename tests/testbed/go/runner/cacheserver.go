package main

import "errors"

func cacheServerCmd(args []string) error {
	return errors.New("cache-server: not implemented yet")
}
