; The Windows installer of idlepool (NSIS 3, `make windows-installer`).
;
; Per user, without administrator rights: the programs go to
; %LOCALAPPDATA%\Programs\idlepool, the Start menu entry to the user's
; Start menu, "start when I sign in" to HKCU's Run key under the same
; value name and with the same command as the tray app's check mark
; (app/autostart_windows.go), and the uninstaller's entry to HKCU's
; Uninstall key. The owner's data (keys, settings, history, pending
; receipts in %APPDATA%\idlepool; caches in %LOCALAPPDATA%\idlepool) is
; never touched by an install, so installing a newer version over an
; older one keeps it.
;
; Command line (besides NSIS's /S for silent and /D=DIR):
;   installer /NOAUTOSTART     do not start idlepool at sign-in
;   installer /RESTART         start the tray app once installed (the
;                              self-update's silent install, which
;                              stops the running one to replace it)
;   uninstaller /PURGE         also delete the owner's data (a silent
;                              uninstall keeps it unless /PURGE is given)
;
; Defines from the Makefile: VERSION (X.Y.Z), BUILD (a number), BINDIR
; (the signed executables), OUTFILE, ICON; SIGN, a command that signs the
; file named by its last two arguments (IN OUT) for the uninstaller; FAST
; stores the files uncompressed (the tests' older build to upgrade from).

Unicode true
Target amd64-unicode
ManifestDPIAware true
RequestExecutionLevel user
!ifdef FAST
SetCompress off
!else
SetCompressor /SOLID lzma
!endif
!ifdef SIGN
!uninstfinalize '${SIGN} "%1" "%1"'
!endif

!include "MUI2.nsh"
!include "LogicLib.nsh"
!include "FileFunc.nsh"
!include "Sections.nsh"

!define NAME "idlepool"
!define TRAY "idlepool-tray.exe"
!define WINDOW "idlepool-window.exe"
!define CLI "idlepool.exe"
!define RUNKEY "Software\Microsoft\Windows\CurrentVersion\Run"
!define RUNVALUE "idlepool-tray"
!define UNINSTKEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\idlepool"

Name "${NAME}"
OutFile "${OUTFILE}"
InstallDir "$LOCALAPPDATA\Programs\${NAME}"
BrandingText "${NAME} ${VERSION}"
VIProductVersion "${VERSION}.${BUILD}"
VIAddVersionKey "ProductName" "${NAME}"
VIAddVersionKey "FileDescription" "${NAME} installer"
VIAddVersionKey "FileVersion" "${VERSION}.${BUILD}"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "LegalCopyright" "the ${NAME} authors"

!define MUI_ICON "${ICON}"
!define MUI_UNICON "${ICON}"
!define MUI_ABORTWARNING
!define MUI_COMPONENTSPAGE_NODESC
!define MUI_FINISHPAGE_RUN "$INSTDIR\${TRAY}"
!define MUI_FINISHPAGE_RUN_TEXT "Start ${NAME} now"

!insertmacro MUI_PAGE_WELCOME
!insertmacro MUI_PAGE_COMPONENTS
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH
!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES
!insertmacro MUI_LANGUAGE "English"

; StopApp ends every idlepool process started from this user's install
; (the tray app, its window process and its workers, a `idlepool join`),
; then waits until Windows has released the files, up to 10 seconds.
!macro StopApp
  nsExec::Exec '"$SYSDIR\taskkill.exe" /F /IM ${TRAY}'
  Pop $0
  nsExec::Exec '"$SYSDIR\taskkill.exe" /F /IM ${WINDOW}'
  Pop $0
  nsExec::Exec '"$SYSDIR\taskkill.exe" /F /IM ${CLI}'
  Pop $0
  StrCpy $1 0
  ${Do}
    ${IfNot} ${FileExists} "$INSTDIR\${TRAY}"
      ${Break}
    ${EndIf}
    ; a running program's file cannot be opened for writing
    ClearErrors
    FileOpen $2 "$INSTDIR\${TRAY}" a
    ${IfNot} ${Errors}
      FileClose $2
      ${Break}
    ${EndIf}
    IntOp $1 $1 + 1
    ${If} $1 >= 40
      ${Break}
    ${EndIf}
    Sleep 250
  ${Loop}
!macroend

Section "!${NAME} (required)" SecMain
  SectionIn RO
  SetShellVarContext current
  !insertmacro StopApp
  SetOutPath "$INSTDIR"
  SetOverwrite on
  File "${BINDIR}\${TRAY}"
  File "${BINDIR}\${WINDOW}"
  File "${BINDIR}\${CLI}"
  ; The donor's guide, which the tray's Help item opens (makensis reads
  ; it relative to this script's directory).
  File "..\..\docs\donor.md"
  WriteUninstaller "$INSTDIR\uninstall.exe"
  CreateShortcut "$SMPROGRAMS\${NAME}.lnk" "$INSTDIR\${TRAY}" "" "$INSTDIR\${TRAY}" 0 SW_SHOWNORMAL "" "Lend this computer's idle time to compute pools"

  WriteRegStr HKCU "${UNINSTKEY}" "DisplayName" "${NAME}"
  WriteRegStr HKCU "${UNINSTKEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINSTKEY}" "Publisher" "the ${NAME} authors"
  WriteRegStr HKCU "${UNINSTKEY}" "DisplayIcon" "$INSTDIR\${TRAY}"
  WriteRegStr HKCU "${UNINSTKEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTKEY}" "UninstallString" '"$INSTDIR\uninstall.exe"'
  WriteRegStr HKCU "${UNINSTKEY}" "QuietUninstallString" '"$INSTDIR\uninstall.exe" /S'
  WriteRegDWORD HKCU "${UNINSTKEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINSTKEY}" "NoRepair" 1
  ${GetSize} "$INSTDIR" "/S=0K" $0 $1 $2
  WriteRegDWORD HKCU "${UNINSTKEY}" "EstimatedSize" $0
SectionEnd

; The same value the tray app's "Start at login" check mark writes and
; reads: `"C:\...\idlepool-tray.exe"`.
Section "Start ${NAME} when I sign in" SecAutostart
  WriteRegStr HKCU "${RUNKEY}" "${RUNVALUE}" '"$INSTDIR\${TRAY}"'
SectionEnd

Section "-autostart off" SecNoAutostart
  ${IfNot} ${SectionIsSelected} ${SecAutostart}
    DeleteRegValue HKCU "${RUNKEY}" "${RUNVALUE}"
  ${EndIf}
SectionEnd

; /RESTART: the self-update ran this installer (/S /RESTART) and the
; tray app it stopped starts again, now the new version.
Section "-restart" SecRestart
  ${GetParameters} $R0
  ClearErrors
  ${GetOptions} $R0 "/RESTART" $R1
  ${IfNot} ${Errors}
    Exec '"$INSTDIR\${TRAY}"'
  ${EndIf}
SectionEnd

Function .onInit
  SetShellVarContext current
  ${GetParameters} $R0
  ClearErrors
  ${GetOptions} $R0 "/NOAUTOSTART" $R1
  ${IfNot} ${Errors}
    !insertmacro UnselectSection ${SecAutostart}
  ${Else}
    ; An upgrade keeps the owner's choice: if idlepool is installed and
    ; its Run value is gone (unchecked in the tray), leave it off.
    ReadRegStr $R2 HKCU "${UNINSTKEY}" "InstallLocation"
    ReadRegStr $R3 HKCU "${RUNKEY}" "${RUNVALUE}"
    ${If} $R2 != ""
    ${AndIf} $R3 == ""
      !insertmacro UnselectSection ${SecAutostart}
    ${EndIf}
    ${If} $R2 != ""
      StrCpy $INSTDIR $R2
    ${EndIf}
  ${EndIf}
FunctionEnd

Section "Uninstall"
  SetShellVarContext current
  !insertmacro StopApp
  DeleteRegValue HKCU "${RUNKEY}" "${RUNVALUE}"
  Delete "$SMPROGRAMS\${NAME}.lnk"
  Delete "$INSTDIR\${TRAY}"
  Delete "$INSTDIR\${WINDOW}"
  Delete "$INSTDIR\${CLI}"
  Delete "$INSTDIR\donor.md"
  Delete "$INSTDIR\uninstall.exe"
  RMDir "$INSTDIR"
  DeleteRegKey HKCU "${UNINSTKEY}"

  ${GetParameters} $R0
  ClearErrors
  ${GetOptions} $R0 "/PURGE" $R1
  ${IfNot} ${Errors}
    Goto purge
  ${EndIf}
  MessageBox MB_YESNO|MB_ICONQUESTION "Keep your idlepool data?$\r$\n$\r$\nYour device keys, settings, contribution history and the receipts still waiting for confirmation stay in $APPDATA\${NAME}, so that a later install goes on where this one stopped.$\r$\n$\r$\nChoose No to delete them too." /SD IDYES IDYES done
purge:
  RMDir /r "$APPDATA\${NAME}"
  RMDir /r "$LOCALAPPDATA\${NAME}"
done:
SectionEnd
