# Copyright (c) HashiCorp, Inc.
# SPDX-License-Identifier: MPL-2.0

# Numbers
whole_number                = 5
fractional_number           = 3.2
fractional_number_precision = 3.14159265358979323846264338327950288419716939937510582097494459

# Strings
string_ascii           = "hello"
string_unicode_bmp     = "ЖЖ"
string_unicode_astral  = "👩‍👩‍👧‍👦"
string_unicode_nonnorm = "años" # This is intentionally a combining tilde followed by n

# Booleans
true  = true
false = false

# Null
null = null
