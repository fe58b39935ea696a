# Runs at install time (dist/CMakeLists.txt's install(CODE)): writes the
# units for the prefix being installed to and installs them, the sysusers.d
# entry and the example config. file(INSTALL) adds $DESTDIR and records every
# file in install_manifest.txt.
set(prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" prefix "${prefix}")
if(prefix STREQUAL "/usr" OR prefix STREQUAL "")
  set(sysconfdir "/etc")
  set(localstatedir "/var")
elseif(prefix MATCHES "^/opt/(.+)$")
  set(sysconfdir "/etc/opt/${CMAKE_MATCH_1}")
  set(localstatedir "/var/opt/${CMAKE_MATCH_1}")
else()
  set(sysconfdir "${prefix}/etc")
  set(localstatedir "${prefix}/var")
endif()
if(IS_ABSOLUTE "${PTSTORE_SBINDIR}")
  set(PTSTORE_FULL_SBINDIR "${PTSTORE_SBINDIR}")
else()
  set(PTSTORE_FULL_SBINDIR "${prefix}/${PTSTORE_SBINDIR}")
endif()
set(PTSTORE_FULL_SYSCONFDIR "${sysconfdir}")
set(PTSTORE_FULL_LOCALSTATEDIR "${localstatedir}")

set(out "${PTSTORE_DIST_BIN}/for-install")
configure_file("${PTSTORE_DIST_SRC}/systemd/ptstored.service.in" "${out}/ptstored.service" @ONLY)
configure_file("${PTSTORE_DIST_SRC}/systemd/mnt-ptstore.mount.in" "${out}/mnt-ptstore.mount" @ONLY)
configure_file("${PTSTORE_DIST_SRC}/systemd/ptstore.sysusers.in" "${out}/ptstore.conf" @ONLY)

file(INSTALL DESTINATION "${prefix}/${PTSTORE_SYSTEMD_UNITDIR}" TYPE FILE
     FILES "${out}/ptstored.service" "${out}/mnt-ptstore.mount")
file(INSTALL DESTINATION "${prefix}/${PTSTORE_SYSUSERSDIR}" TYPE FILE FILES "${out}/ptstore.conf")
file(INSTALL DESTINATION "${sysconfdir}/ptstore" TYPE FILE FILES "${PTSTORE_DIST_SRC}/ptstored.toml")
