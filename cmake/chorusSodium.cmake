# Defines chorus::sodium, an INTERFACE IMPORTED target for libsodium, unless it exists already.
# Used by chorus's own build and, installed next to chorusConfig.cmake, by the package config,
# which links it into the static chorus::chorus's interface (the shared library hides it).
#
# It never fails: when libsodium cannot be found, chorus::sodium is simply not defined and the
# caller decides (chorus's build stops; the package config reports chorus as not found).
# pkg-config is preferred, since it knows the flags libsodium was built with; without it,
# find_path / find_library look in the usual places. The target is not GLOBAL and the pkg-config
# results live under the CHORUS_SODIUM prefix, so nothing collides with a consumer's own
# pkg_check_modules(SODIUM ...) or PkgConfig::SODIUM.
if(NOT TARGET chorus::sodium)
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(CHORUS_SODIUM QUIET libsodium)
  endif()
  if(CHORUS_SODIUM_FOUND)
    add_library(chorus::sodium INTERFACE IMPORTED)
    set_target_properties(chorus::sodium PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${CHORUS_SODIUM_INCLUDE_DIRS}"
      INTERFACE_COMPILE_OPTIONS "${CHORUS_SODIUM_CFLAGS_OTHER}"
      INTERFACE_LINK_LIBRARIES "${CHORUS_SODIUM_LINK_LIBRARIES}")
  else()
    find_path(CHORUS_SODIUM_INCLUDE_DIR sodium.h)
    find_library(CHORUS_SODIUM_LIBRARY sodium)
    if(CHORUS_SODIUM_INCLUDE_DIR AND CHORUS_SODIUM_LIBRARY)
      add_library(chorus::sodium INTERFACE IMPORTED)
      set_target_properties(chorus::sodium PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${CHORUS_SODIUM_INCLUDE_DIR}"
        INTERFACE_LINK_LIBRARIES "${CHORUS_SODIUM_LIBRARY}")
    endif()
  endif()
endif()
