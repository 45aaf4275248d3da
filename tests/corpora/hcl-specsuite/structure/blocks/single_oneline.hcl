# Copyright (c) HashiCorp, Inc.
# SPDX-License-Identifier: MPL-2.0

a { b = "foo" }
