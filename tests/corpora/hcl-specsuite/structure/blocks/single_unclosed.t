diagnostics {
  error {
    from {
      line   = 1
      column = 3
      byte   = 2
    }
    to {
      line   = 1
      column = 4
      byte   = 3
    }
  }
}
