# Copyright (c) HashiCorp, Inc.
# SPDX-License-Identifier: MPL-2.0

a = "a value", b = "b value"
