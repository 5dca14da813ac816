# cmake -DJSON=<bundle.json> [-DSTAMP=<file>] -P strataCheckBundleJson.cmake
#
# Fails with the file and the reason when bundle.json is not valid JSON or lacks
# what a host requires of it: "name" (letters, digits, '_', '.', '-'), "version"
# (MAJOR.MINOR.PATCH[-pre][+build]) and "abi" {"major", "minor"} (integers).
# moc only warns about a bad file and embeds nothing, and the host would later say
# "metadata not found": the build says it instead. strata_add_bundle runs it when
# it configures and again whenever the file changes.
include("${CMAKE_CURRENT_LIST_DIR}/strataBundleJson.cmake")
strata_check_bundle_json("${JSON}" error name version)
if(error)
  message(FATAL_ERROR "${error}")
endif()
if(STAMP)
  file(WRITE "${STAMP}" "${name} ${version}\n")
endif()
